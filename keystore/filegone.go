package keystore

import "errors"

// ErrFileGone: the file a store keeps its records in was deleted, or replaced by another
// file, while the store had it open (the bbolt store checks at every commit). Writes made
// after that would land in a file that no later process opens, so the store refuses every
// later call with an error wrapping ErrFileGone: the client sends nothing more on its
// strength. Restore the file (or move the new one away) and restart the process.
var ErrFileGone = errors.New("keystore: the store's file was deleted or replaced while open")
