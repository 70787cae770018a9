package idemserver_test

import (
	"testing"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/servertest"
)

func TestMemoryConformance(t *testing.T) {
	servertest.Run(t, func(t *testing.T) idemserver.Backend { return idemserver.NewMemory() })
}

// TestMemoryConformanceColliding runs the suite on a Memory whose scopes all share one hash.
func TestMemoryConformanceColliding(t *testing.T) {
	servertest.Run(t, func(t *testing.T) idemserver.Backend { return idemserver.NewMemoryColliding() })
}
