package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore/pgstore"
)

// openFleetClient is the snippet docs/FLEET.md quotes: one instance of a fleet, its client
// on the shared PostgreSQL keystore.
func openFleetClient(ctx context.Context, databaseURL string, addAPIKey func(*http.Request) error) (*idem.Client, *pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL) // add search_path=... to pick a schema
	if err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := pgstore.Migrate(ctx, pool); err != nil { // explicit and idempotent; Open never migrates
		pool.Close()
		return nil, nil, err
	}
	store, err := pgstore.Open(ctx, pool, &pgstore.Options{SecretHeaders: []string{"X-Api-Key"}})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	c, err := idem.NewClient(idem.Config{BaseURL: "https://api.example.com", Store: store,
		KeyStatusURL: "/v1/payments/operations/{key}", Credentials: addAPIKey,
		Fleet: idem.FleetConfig{ReclaimInterval: 30 * time.Second}}) // Owner and LeaseTTL: the defaults
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, pool, nil
}

// The snippet refuses a malformed database URL before connecting (the fleet test runs the
// same calls against PostgreSQL).
func TestFleetDocSnippetRefusesBadURL(t *testing.T) {
	_, _, err := openFleetClient(context.Background(), "postgres://%zz", nil)
	require.Error(t, err)
}
