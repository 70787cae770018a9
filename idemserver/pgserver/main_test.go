package pgserver_test

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the crash test's server child when the parent asked for one.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		if err := childMain(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
