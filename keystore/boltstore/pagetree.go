package boltstore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
)

// The check of the file's page tree that Open and OpenReadOnly make before bbolt reads it
// (checkFile, deep).

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
