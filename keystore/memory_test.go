package keystore_test

import (
	"testing"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/keystoretest"
)

func TestMemoryConformance(t *testing.T) {
	keystoretest.Run(t, func(t *testing.T) keystore.Store { return keystore.NewMemory() })
}
