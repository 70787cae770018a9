package keystore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/keystore"
)

// Two instances share one store: A persists the key already claimed, B finds the lease live
// and waits, A dies, B takes the record over once the lease expires, and A's late write is
// refused by the fencing token, so A learns it must not send again.
func Example_fleet() {
	ctx := context.Background()
	store := keystore.NewMemory() // a fleet shares keystore/pgstore; every backend has these rules
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

	// Instance A persists the record claimed (Fence 1), then sends.
	rec := &keystore.Record{Scope: "acme", Key: "9b2f0e3c-6a1d-4e8b-b1c4-2f7d5a9e0c11", Intent: "order-42",
		Fingerprint: "…", State: keystore.StatePending, Request: keystore.Request{Method: "POST", URL: "/v1/payments"},
		CreatedAt: t0, UpdatedAt: t0, Owner: "instance-a", LeaseUntil: t0.Add(30 * time.Second), Fence: 1}
	if err := store.Create(ctx, rec); err != nil {
		panic(err)
	}

	// Instance B handles the same order: the intent leads to A's key, whose lease is live.
	found, _ := store.GetByIntent(ctx, "acme", "order-42")
	_, err := store.Claim(ctx, "acme", found.Key, keystore.Lease{Owner: "instance-b", Now: t0.Add(time.Second), Until: t0.Add(31 * time.Second)})
	var claimed *keystore.ClaimedError
	if errors.As(err, &claimed) {
		fmt.Printf("B waits: held by %s until %s\n", claimed.Owner, claimed.Until.Format(time.TimeOnly))
	}

	// A stops renewing (it died); after the expiry B continues the same key.
	mine, err := store.Claim(ctx, "acme", found.Key, keystore.Lease{Owner: "instance-b", Now: t0.Add(30 * time.Second), Until: t0.Add(60 * time.Second)})
	if err != nil {
		panic(err)
	}
	fmt.Printf("B owns the key at fence %d\n", mine.Fence)

	// A wakes up and tries to record an outcome with its old fence: refused.
	late := rec.Clone()
	late.State = keystore.StateFailed
	err = store.Update(ctx, late)
	fmt.Println("A's write fenced:", errors.Is(err, keystore.ErrFenced))
	fmt.Println("A may renew:", store.Renew(ctx, "acme", rec.Key, "instance-a", 1, t0.Add(time.Hour)) == nil)
	// Output:
	// B waits: held by instance-a until 12:00:30
	// B owns the key at fence 2
	// A's write fenced: true
	// A may renew: false
}
