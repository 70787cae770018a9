package keystore

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The log keeps order and positions across chunks, frees the chunks the front has passed,
// and squeezes out dropped entries once they are most of it.
func TestFinishedLog(t *testing.T) {
	var l finishedLog
	recs := make([]*memRecord, 3*finishedChunk+10)
	for i := range recs {
		recs[i] = &memRecord{}
		l.push(finishedEntry{scopedName{"", strconv.Itoa(i)}, recs[i]})
	}
	require.Equal(t, len(recs), l.len())
	require.Len(t, l.chunks, 4)
	for _, i := range []int{0, finishedChunk - 1, finishedChunk, len(recs) - 1} {
		require.Same(t, recs[i], l.at(i).rec, i)
	}

	// Dropping the first chunk and one more entry frees that chunk and moves the base.
	for i := range finishedChunk + 1 {
		l.at(i).rec = nil
		l.tombs++
	}
	l.trim()
	require.Equal(t, int64(finishedChunk+1), l.base)
	require.Equal(t, 0, l.tombs)
	require.Len(t, l.chunks, 3)
	require.Equal(t, len(recs)-finishedChunk-1, l.len())
	require.Same(t, recs[finishedChunk+1], l.at(0).rec)

	// Most of the rest dropped, but not the front one: the log is rebuilt without them.
	n := l.len()
	for i := 1; i < n; i++ {
		if i%10 != 0 {
			l.at(i).rec = nil
			l.tombs++
		}
	}
	l.trim()
	require.Equal(t, 0, l.tombs)
	require.Equal(t, 1+(n-1)/10, l.len())
	require.Same(t, recs[finishedChunk+1], l.at(0).rec)
	require.Same(t, recs[finishedChunk+11], l.at(1).rec)
	require.Equal(t, int64(finishedChunk+1), l.base)

	// Everything dropped: the log is empty and takes new entries.
	for i := range l.len() {
		l.at(i).rec = nil
		l.tombs++
	}
	l.trim()
	require.Zero(t, l.len())
	require.Zero(t, l.tombs)
	l.push(finishedEntry{rec: recs[0]})
	require.Equal(t, 1, l.len())
	require.Same(t, recs[0], l.at(0).rec)
}

// A log whose front reaches the end of its only, full chunk lets that chunk go.
func TestFinishedLogFullChunkDropped(t *testing.T) {
	var l finishedLog
	for range finishedChunk {
		l.push(finishedEntry{rec: &memRecord{}})
	}
	for i := range finishedChunk {
		l.at(i).rec = nil
		l.tombs++
	}
	l.trim()
	require.Empty(t, l.chunks)
	require.Zero(t, l.len())
	require.Equal(t, int64(finishedChunk), l.base)
}
