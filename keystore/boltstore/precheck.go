package boltstore

import (
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
