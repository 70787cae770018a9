//go:build race

package idemserver_test

// raceEnabled: the race detector changes what escapes and empties sync.Pool at random, so
// allocation counts are not the program's.
const raceEnabled = true
