//go:build !race

package idemserver_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
