package idem

import (
	"os"
	"testing"
)

// TestMain lets crash tests re-run this test binary as a child process that sends payments
// and gets SIGKILLed (see crash_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	if os.Getenv(finalChildEnv) != "" {
		os.Exit(finalChild())
	}
	os.Exit(m.Run())
}
