package keystore

// finishedLog lists Memory's records in the order they became terminal, for PurgeBatch. It
// is kept in fixed chunks rather than one slice: a slice that grows by reallocation copied
// every entry again at each growth while the store filled (several times the log's size in
// garbage, and fresh memory the process had to fault in), where a chunk is written once and
// freed whole when the purge has passed it.
type finishedLog struct {
	chunks [][]finishedEntry // every chunk but the last is full; chunks[0][front:] is the first entry
	front  int
	base   int64 // position of the first entry in the order records became terminal
	tombs  int   // entries whose record was dropped (rec == nil)
}

// finishedChunk is the number of entries in a chunk: 20 KiB.
const finishedChunk = 512

// finishedEntry is a record that became terminal; rec identifies that exact version, so an
// entry whose record changed or went away since is recognised as stale.
type finishedEntry struct {
	k   scopedName
	rec *memRecord
}

func (l *finishedLog) len() int {
	if len(l.chunks) == 0 {
		return 0
	}
	return (len(l.chunks)-1)*finishedChunk + len(l.chunks[len(l.chunks)-1]) - l.front
}

// at returns the i-th entry from the first, 0 <= i < len().
func (l *finishedLog) at(i int) *finishedEntry {
	i += l.front
	return &l.chunks[i/finishedChunk][i%finishedChunk]
}

func (l *finishedLog) push(e finishedEntry) {
	if n := len(l.chunks); n == 0 || len(l.chunks[n-1]) == finishedChunk {
		l.chunks = append(l.chunks, make([]finishedEntry, 0, finishedChunk))
	}
	last := &l.chunks[len(l.chunks)-1]
	*last = append(*last, e)
}

// trim drops the dropped entries at the front, and squeezes out the others once they are
// most of the log (cursors issued before then become approximate: a later batch may examine
// a few entries twice, or pass over some until the next pass).
func (l *finishedLog) trim() {
	for l.len() > 0 && l.at(0).rec == nil {
		l.front++
		l.base++
		l.tombs--
		if l.front == finishedChunk {
			l.chunks[0] = nil
			l.chunks, l.front = l.chunks[1:], 0
		}
	}
	if n := l.len(); n > 2*finishedChunk && l.tombs > n/2 {
		kept := finishedLog{base: l.base}
		for i := range n {
			if e := l.at(i); e.rec != nil {
				kept.push(*e)
			}
		}
		*l = kept
	}
}
