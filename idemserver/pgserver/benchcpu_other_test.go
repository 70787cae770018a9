//go:build !linux

package pgserver_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// serverCPU is not measured outside Linux (no /proc): no metric.
type serverCPU struct{}

func newServerCPU(*testing.B, *pgxpool.Pool) *serverCPU { return nil }

func (*serverCPU) used() time.Duration { return 0 }

// processCPU is not measured outside Linux: 0.
func processCPU() time.Duration { return 0 }
