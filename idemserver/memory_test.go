package idemserver_test

import (
	"testing"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/servertest"
)

func TestMemoryConformance(t *testing.T) {
	servertest.Run(t, func(t *testing.T) idemserver.Backend { return idemserver.NewMemory() })
}
