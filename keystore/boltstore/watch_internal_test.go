package boltstore

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkFileWatch measures the check that runs after every commit (fstat of the open file,
// stat of its path), to set against a commit's two fsyncs.
func BenchmarkFileWatch(b *testing.B) {
	path := filepath.Join(b.TempDir(), "keys.db")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w := &fileWatch{path: path, file: f}
	for b.Loop() {
		if err := w.check(); err != nil {
			b.Fatal(err)
		}
	}
}
