package pgstore_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/pgstore"
)

// Deploy-time schema creation, then a Store per instance, and the orphan reclaim any instance
// may run: records of a dead instance, claimed for this one with a fresh fencing token.
func Example() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL")) // add search_path=... to pick a schema
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil { // explicit and idempotent; Open never migrates
		log.Fatal(err)
	}
	store, err := pgstore.Open(ctx, pool, &pgstore.Options{SecretHeaders: []string{"X-Api-Key"}})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	now := time.Now()
	orphans, err := store.ClaimExpired(ctx, keystore.Lease{Owner: "pod-7f9c", Now: now, Until: now.Add(30 * time.Second)}, 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, rec := range orphans {
		log.Printf("reconciling %s/%s at fence %d", rec.Scope, rec.Key, rec.Fence)
	}
}
