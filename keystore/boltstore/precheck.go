package boltstore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"slices"
)

// The bbolt file format, as written by go.etcd.io/bbolt v1.5.0 (internal/common/page.go,
// meta.go, db.go), in the machine's byte order. Every page starts with a 16-byte header:
//
//	id u64, flags u16, count u16, overflow u32
//
// Pages 0 and 1 are meta pages; their meta follows the header:
//
//	magic u32, version u32, pageSize u32, flags u32, root pgid u64, root sequence u64,
//	freelist pgid u64, pgid u64 (high-water mark: pages in use), txid u64,
//	checksum u64 (FNV-64a of the 56 bytes before it)
//
// A freelist page holds count page ids (u64) after its header; if count is 0xFFFF the real
// count is the first u64 and the ids follow it. A branch or leaf page holds count 16-byte
// elements after its header, branch {pos u32, ksize u32, child pgid u64} and leaf {flags u32,
// pos u32, ksize u32, vsize u32}, where pos is the offset of the key from the element and the
// value follows the key. overflow is the number of pages after the first that the page spans.
const (
	pageHeaderSize  = 16
	metaOff         = pageHeaderSize
	metaSize        = 64
	metaChecksumOff = 56

	bboltMagic   = 0xED0CDAED
	bboltVersion = 2

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagFreelist = 0x10

	bucketLeafFlag   = 0x01 // a leaf element that is a bucket: its value starts with a bucket header
	bucketHeaderSize = 16   // root pgid u64 (0 for an inline bucket), sequence u64

	pgidNoFreelist = ^uint64(0)
	maxKeySize     = 32768 // bbolt.MaxKeySize

	// bboltMinHeader is the shortest file whose first page header and magic can be read.
	bboltMinHeader = metaOff + 4
	// metaProbeSize is how much bbolt reads to find a meta page before it knows the page size.
	metaProbeSize = 0x1000
)

// meta is a decoded bbolt meta page.
type meta struct {
	magic, version, pageSize uint32
	root, freelist, hwm      uint64
	txid                     uint64
	err                      error // nil if bbolt accepts this meta (magic, version, checksum)
}

// parseMeta decodes the meta in b, a meta page from its start (at least metaOff+metaSize
// bytes), and checks it as bbolt's Meta.Validate does.
func parseMeta(b []byte) meta {
	m := b[metaOff : metaOff+metaSize]
	e := binary.NativeEndian
	out := meta{
		magic:    e.Uint32(m[0:]),
		version:  e.Uint32(m[4:]),
		pageSize: e.Uint32(m[8:]),
		root:     e.Uint64(m[16:]),
		freelist: e.Uint64(m[32:]),
		hwm:      e.Uint64(m[40:]),
		txid:     e.Uint64(m[48:]),
	}
	h := fnv.New64a()
	_, _ = h.Write(m[:metaChecksumOff])
	switch {
	case out.magic != bboltMagic:
		out.err = errors.New("no bbolt magic")
	case out.version != bboltVersion:
		out.err = fmt.Errorf("bbolt format version %d, want %d", out.version, bboltVersion)
	case e.Uint64(m[metaChecksumOff:]) != h.Sum64():
		out.err = errors.New("checksum mismatch")
	}
	return out
}

// checkFile inspects an existing, non-empty file with plain reads, without writing to it and
// before bbolt maps it into memory, so that bbolt is not handed a file it would read past the
// end of (a fault that kills the process) or loop in. It returns ErrNotKeystore if the file is
// not a bbolt file, and ErrCorrupt if it is a damaged one: no valid meta page, a meta page
// that needs more pages than the file holds (a truncated file), root or freelist outside the
// file, a damaged freelist page (which bbolt would trust to hand out live pages for reuse), or
// a damaged page tree (see checkTree).
//
// It picks the page size and the meta page as bbolt does (DB.getPageSize, DB.mmap, DB.meta):
// the valid meta page with the highest transaction id.
//
// Without deep, it checks only the meta pages and the file size: enough for a read-only
// bbolt.Open, which reads nothing else, and safe while another process writes the file. The
// deep check (freelist, page tree) needs a stable file: run it holding the file lock.
func checkFile(path string, deep bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	size := fi.Size()
	if size < bboltMinHeader {
		return fmt.Errorf("%w: %s: %d bytes, too short for a bbolt file", ErrNotKeystore, path, size)
	}
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrCorrupt, path, fmt.Sprintf(format, args...))
	}

	head := make([]byte, bboltMinHeader)
	if _, err := f.ReadAt(head, 0); err != nil {
		return fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	magic0 := binary.NativeEndian.Uint32(head[metaOff:]) == bboltMagic
	pageSize, found, err := findPageSize(f, size)
	if err != nil {
		return fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	if !magic0 && !found {
		return fmt.Errorf("%w: %s: no bbolt header", ErrNotKeystore, path)
	}
	if pageSize < 512 || pageSize&(pageSize-1) != 0 {
		return corrupt("page size %d in meta page", pageSize)
	}
	if size < 2*pageSize {
		return corrupt("file is %d bytes, shorter than its two meta pages of %d bytes (truncated)", size, pageSize)
	}

	var metas [2]meta
	for i := range metas {
		b := make([]byte, metaOff+metaSize)
		if _, err := f.ReadAt(b, int64(i)*pageSize); err != nil {
			return fmt.Errorf("boltstore: open %s: read meta page %d: %w", path, i, err)
		}
		metas[i] = parseMeta(b)
	}
	m0, m1 := metas[0], metas[1]
	if m0.err != nil && m1.err != nil {
		if m0.magic != bboltMagic && m1.magic != bboltMagic {
			return fmt.Errorf("%w: %s: no bbolt header", ErrNotKeystore, path)
		}
		return corrupt("both meta pages are damaged: page 0: %v; page 1: %v", m0.err, m1.err)
	}
	m := m0
	if m0.err != nil || (m1.err == nil && m1.txid > m0.txid) {
		m = m1
	}

	ps := uint64(pageSize)
	switch {
	case uint64(m.pageSize) != ps:
		return corrupt("meta page (txid %d) has page size %d, the file %d", m.txid, m.pageSize, ps)
	case m.hwm < 4: // bbolt creates a file with 4 pages and never shrinks it
		return corrupt("meta page (txid %d) has high-water mark %d", m.txid, m.hwm)
	case m.hwm > uint64(size)/ps:
		need := "more than the largest file"
		if m.hwm <= uint64(1<<62)/ps {
			need = fmt.Sprintf("%d", m.hwm*ps)
		}
		return corrupt("file is %d bytes but its meta page (txid %d) needs %d pages of %d bytes = %s bytes (truncated)",
			size, m.txid, m.hwm, ps, need)
	case m.root < 2 || m.root >= m.hwm:
		return corrupt("root page %d outside pages 2 to %d", m.root, m.hwm-1)
	case m.freelist != pgidNoFreelist && (m.freelist < 2 || m.freelist >= m.hwm):
		return corrupt("freelist page %d outside pages 2 to %d", m.freelist, m.hwm-1)
	}

	if !deep {
		return nil
	}
	// Pages that the tree must not reach: the meta pages, the freelist page, the free pages.
	taken := make([]byte, m.hwm)
	taken[0], taken[1] = pageMeta, pageMeta
	if m.freelist != pgidNoFreelist {
		overflow, free, err := checkFreelist(f, m, ps)
		if err != nil {
			return corrupt("freelist page %d: %v", m.freelist, err)
		}
		for i := range uint64(overflow) + 1 {
			taken[m.freelist+i] = pageFreelist
		}
		for _, id := range free {
			taken[id] = pageFree
		}
	}
	if err := checkTree(f, m, ps, taken); err != nil {
		return corrupt("%v", err)
	}
	return nil
}

// findPageSize returns the page size that bbolt's DB.getPageSize uses for the file: the one
// in the first meta page if it is valid, else the one in the first valid meta page found at
// 1 KiB, 2 KiB, ... 16 MiB, else the OS page size (bbolt's default). found reports whether a
// valid meta page gave it.
func findPageSize(f *os.File, size int64) (pageSize int64, found bool, err error) {
	buf := make([]byte, metaProbeSize)
	if n, err := f.ReadAt(buf, 0); n == len(buf) {
		if m := parseMeta(buf); m.err == nil {
			return int64(m.pageSize), true, nil
		}
	} else if err != io.EOF {
		return 0, false, err
	}
	for i := range 15 {
		pos := int64(1024) << i
		if pos >= size-1024 {
			break
		}
		n, err := f.ReadAt(buf, pos)
		if n == len(buf) || (err == io.EOF && int64(n) == size-pos) {
			if m := parseMeta(buf); m.err == nil {
				return int64(m.pageSize), true, nil
			}
		} else if err != io.EOF {
			return 0, false, err
		}
	}
	return int64(os.Getpagesize()), false, nil
}

// pageHeader decodes a page header.
func pageHeader(b []byte) (id uint64, flags, count uint16, overflow uint32) {
	e := binary.NativeEndian
	return e.Uint64(b[0:]), e.Uint16(b[8:]), e.Uint16(b[10:]), e.Uint32(b[12:])
}

// checkFreelist checks the freelist page of m as bbolt will load it when opening the file for
// writing: its header, its extent, and that every page id it lists is a page in the file other
// than the freelist itself, listed once. It returns the freelist's overflow (its page count
// minus one) and the ids it lists.
func checkFreelist(f *os.File, m meta, ps uint64) (overflow uint32, ids []uint64, err error) {
	var hdr [pageHeaderSize + 8]byte
	if _, err := f.ReadAt(hdr[:], int64(m.freelist*ps)); err != nil {
		return 0, nil, err
	}
	id, flags, count, overflow := pageHeader(hdr[:])
	if id != m.freelist || flags != flagFreelist {
		return 0, nil, fmt.Errorf("identifies as page %d with flags %#x", id, flags)
	}
	if uint64(overflow) >= m.hwm-m.freelist {
		return 0, nil, fmt.Errorf("%d overflow pages run past the last page %d", overflow, m.hwm-1)
	}
	capacity := (uint64(overflow)+1)*ps - pageHeaderSize // bytes after the header
	first, n := uint64(0), uint64(count)
	if count == 0xFFFF {
		first, n = 1, binary.NativeEndian.Uint64(hdr[pageHeaderSize:])
	}
	if n > capacity/8-first {
		return 0, nil, fmt.Errorf("lists %d pages, more than its %d bytes hold", n, capacity)
	}
	if n == 0 {
		return overflow, nil, nil
	}
	b := make([]byte, n*8)
	if _, err := f.ReadAt(b, int64(m.freelist*ps+pageHeaderSize+first*8)); err != nil {
		return 0, nil, err
	}
	ids = make([]uint64, n)
	for i := range ids {
		ids[i] = binary.NativeEndian.Uint64(b[i*8:])
	}
	slices.Sort(ids)
	for i, p := range ids {
		switch {
		case p < 2 || p >= m.hwm:
			return 0, nil, fmt.Errorf("lists page %d, outside pages 2 to %d", p, m.hwm-1)
		case p >= m.freelist && p <= m.freelist+uint64(overflow):
			return 0, nil, fmt.Errorf("lists its own page %d", p)
		case i > 0 && ids[i-1] == p:
			return 0, nil, fmt.Errorf("lists page %d twice", p)
		}
	}
	return overflow, ids, nil
}

// What a page of the file is, for checkTree.
const (
	pageUnseen   = iota // not reached yet
	pageMeta            // page 0 or 1
	pageFreelist        // the freelist page or one of its overflow pages
	pageFree            // listed in the freelist
	pageTree            // reached from the root
)

// checkTree walks the tree of pages of m as bbolt will follow it, with plain reads, and
// checks what bbolt's Tx.Check does of the structure (not of the records): every page
// referenced from the root, overflow pages included, is inside the file, referenced once, and
// neither a meta, freelist nor free page; every page reached names itself and is a branch or
// leaf page whose elements lie inside it, with keys in increasing order and within the range
// its parent gives it (from the parent's key for it, up to the next one); buckets nested in a
// leaf, inline or not, are checked likewise. bbolt checks that range too when it rebuilds the
// freelist in Open, and on a violation it panics while its checking goroutine still reads
// the transaction it has just closed: a fault that kills the process. A damaged page pointer, or a stale page left by a
// lost write, could otherwise make a cycle, in which bbolt's recursive search exhausts the
// goroutine stack (a fatal error that nothing can recover); damaged element offsets would make
// bbolt read and copy what lies outside the page, and writes would spread the damage; and a
// live page listed as free would be handed out for reuse. taken says which pages are meta,
// freelist or free.
//
// It reads every page of the tree once, level by level, sorted, in runs of nearby pages, to
// make few reads.
func checkTree(f *os.File, m meta, ps uint64, taken []byte) error {
	mark := func(id uint64) error {
		if id < 2 || id >= m.hwm {
			return fmt.Errorf("reference to page %d, outside pages 2 to %d", id, m.hwm-1)
		}
		switch taken[id] {
		case pageTree:
			return fmt.Errorf("page %d is referenced twice", id)
		case pageMeta, pageFreelist:
			return fmt.Errorf("page %d is in the tree and is a meta or freelist page", id)
		case pageFree:
			return fmt.Errorf("page %d is in the tree and listed as free", id)
		}
		taken[id] = pageTree
		return nil
	}
	if err := mark(m.root); err != nil {
		return err
	}
	level := []pageRef{{id: m.root}} // pages to read, all marked
	var next []pageRef
	var buf, big []byte
	// visit checks page r.id, whose bytes from its start are in b (at least its first page),
	// and queues the pages it references.
	visit := func(r pageRef, b []byte) error {
		id := r.id
		pid, flags, count, overflow := pageHeader(b)
		switch {
		case pid != id || (flags != flagBranch && flags != flagLeaf):
			return fmt.Errorf("page %d is damaged (identifies as page %d, flags %#x)", id, pid, flags)
		case uint64(overflow) >= m.hwm-id:
			return fmt.Errorf("page %d: %d overflow pages run past the last page %d", id, overflow, m.hwm-1)
		}
		for i := range uint64(overflow) {
			if err := mark(id + 1 + i); err != nil {
				return err
			}
		}
		size := (uint64(overflow) + 1) * ps
		if uint64(len(b)) < size {
			if uint64(cap(big)) < size {
				big = make([]byte, size)
			}
			b = big[:size]
			if _, err := f.ReadAt(b, int64(id*ps)); err != nil {
				return err
			}
		}
		refs, err := checkElements(b[:size], flags, count, r.lo, r.hi)
		if err != nil {
			return fmt.Errorf("page %d: %w", id, err)
		}
		for _, c := range refs {
			if err := mark(c.id); err != nil {
				return fmt.Errorf("page %d: %w", id, err)
			}
			next = append(next, c)
		}
		return nil
	}
	for len(level) > 0 {
		slices.SortFunc(level, func(a, b pageRef) int { return cmp.Compare(a.id, b.id) })
		for len(level) > 0 {
			// A run of nearby pages, of at most 1 MiB, in one read.
			first, n := level[0].id, 1
			for n < len(level) && level[n].id-level[n-1].id <= 16 && (level[n].id-first+1)*ps <= 1<<20 {
				n++
			}
			size := (level[n-1].id - first + 1) * ps
			if uint64(cap(buf)) < size {
				buf = make([]byte, size)
			}
			b := buf[:size]
			if _, err := f.ReadAt(b, int64(first*ps)); err != nil {
				return err
			}
			for _, r := range level[:n] {
				if err := visit(r, b[(r.id-first)*ps:]); err != nil {
					return err
				}
			}
			level = level[n:]
		}
		level, next = next, level[:0]
	}
	return nil
}

// pageRef is a page to check, with the range its keys must lie in: from lo (included) to
// hi (excluded), nil meaning no bound. The root page of a bucket has none; a branch page's
// child i lies from the branch's key i to its key i+1 (or the branch's own hi).
type pageRef struct {
	id     uint64
	lo, hi []byte // copies: the page buffers they come from are reused
}

// checkElements checks the count elements of a branch or leaf page, b (its whole extent, from
// the header), whose keys must lie from lo to hi (see pageRef), and returns the pages they
// reference: a branch page's children, the root pages of the buckets in a leaf. It checks an
// inline bucket's page, inside its value, in turn.
func checkElements(b []byte, flags, count uint16, lo, hi []byte) (refs []pageRef, err error) {
	size := uint64(len(b))
	if pageHeaderSize+uint64(count)*16 > size {
		return nil, fmt.Errorf("%d elements do not fit in %d bytes", count, size)
	}
	e := binary.NativeEndian
	var prev []byte
	for i := range uint64(count) {
		el := pageHeaderSize + i*16
		var key, value []byte
		if flags == flagBranch { // {pos u32, ksize u32, pgid u64}
			pos, ksize := uint64(e.Uint32(b[el:])), uint64(e.Uint32(b[el+4:]))
			if el+pos+ksize > size {
				return nil, fmt.Errorf("key %d runs past the page", i)
			}
			key = b[el+pos : el+pos+ksize]
			// Child i's range: from key i to key i+1, the next child's min (set below).
			from := bytes.Clone(key)
			if len(refs) > 0 {
				refs[len(refs)-1].hi = from
			}
			refs = append(refs, pageRef{id: e.Uint64(b[el+8:]), lo: from, hi: hi})
		} else { // {flags u32, pos u32, ksize u32, vsize u32}
			elFlags, pos := e.Uint32(b[el:]), uint64(e.Uint32(b[el+4:]))
			ksize, vsize := uint64(e.Uint32(b[el+8:])), uint64(e.Uint32(b[el+12:]))
			if el+pos+ksize+vsize > size {
				return nil, fmt.Errorf("element %d runs past the page", i)
			}
			key, value = b[el+pos:el+pos+ksize], b[el+pos+ksize:el+pos+ksize+vsize]
			if elFlags&bucketLeafFlag != 0 {
				if len(value) < bucketHeaderSize {
					return nil, fmt.Errorf("bucket header %d is %d bytes", i, len(value))
				}
				if root := e.Uint64(value); root != 0 {
					refs = append(refs, pageRef{id: root})
				} else if len(value) > bucketHeaderSize { // an inline bucket: a leaf page in the value
					inline := value[bucketHeaderSize:]
					if len(inline) < pageHeaderSize {
						return nil, fmt.Errorf("inline bucket %d is %d bytes", i, len(inline))
					}
					_, iflags, icount, _ := pageHeader(inline)
					if iflags != flagLeaf {
						return nil, fmt.Errorf("inline bucket %d has page flags %#x", i, iflags)
					}
					irefs, err := checkElements(inline, iflags, icount, nil, nil)
					if err != nil {
						return nil, fmt.Errorf("inline bucket %d: %w", i, err)
					}
					refs = append(refs, irefs...)
				}
			}
		}
		if len(key) == 0 || len(key) > maxKeySize {
			return nil, fmt.Errorf("key %d is %d bytes", i, len(key))
		}
		if prev != nil && bytes.Compare(key, prev) <= 0 {
			return nil, fmt.Errorf("key %d is out of order", i)
		}
		if i == 0 && lo != nil && bytes.Compare(key, lo) < 0 {
			return nil, fmt.Errorf("key 0 is below the parent's key for this page")
		}
		if hi != nil && bytes.Compare(key, hi) >= 0 {
			return nil, fmt.Errorf("key %d is not below the parent's next key", i)
		}
		prev = key
	}
	return refs, nil
}
