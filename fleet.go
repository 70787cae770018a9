package idem

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/keystore"
)

// The client's side of the keystore's fleet contract (keystore.Lease): every call sends only
// while it holds the record's lease, renews it while it runs, and stops for good once a
// fenced write tells it that another instance took the record over.

// defaultLeaseTTL is the lease a call holds on its record when FleetConfig.LeaseTTL is 0 (and
// Policy.AttemptTimeout at most a third of it): long
// enough for an attempt (Policy.AttemptTimeout, 10 s by default) and a renewal round trip,
// short enough that a dead instance's records are picked up by the others within a minute.
const defaultLeaseTTL = 30 * time.Second

// ErrLeaseLost: the call stopped because it no longer holds the record's lease: another
// instance claimed the record after this one's lease expired (Cause matches
// keystore.ErrFenced), or the keystore refused the renewal a resend needs (Cause is the
// store's error). Nothing more is sent by this call and its final state is not written: the
// new owner (or a later Do or Recover) finishes the record. OperationError.Unknown is set
// when a request of this call may have executed. Stats.ClaimsLost counts the fenced case.
var ErrLeaseLost = errors.New("idem: lease on the record lost to another instance")

// defaultOwner names this process and Client: host, pid and 8 random bytes, so that a
// restarted process, or a second Client in one process, never shares an owner id.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// leaseDefaults fills and checks Owner, LeaseTTL and ReclaimInterval.
func (c *Client) leaseDefaults() error {
	cfg := &c.cfg
	if cfg.Fleet.LeaseTTL < 0 || cfg.Fleet.ReclaimInterval < 0 {
		return fmt.Errorf("%w: LeaseTTL and ReclaimInterval must not be negative", ErrInvalidConfig)
	}
	if cfg.Fleet.LeaseTTL == 0 {
		cfg.Fleet.LeaseTTL = max(defaultLeaseTTL, 3*c.policy.AttemptTimeout)
	}
	if cfg.Fleet.LeaseTTL <= c.policy.AttemptTimeout {
		return fmt.Errorf("%w: LeaseTTL %s is not longer than Policy.AttemptTimeout %s: an attempt could outlive the lease and overlap another instance's",
			ErrInvalidConfig, cfg.Fleet.LeaseTTL, c.policy.AttemptTimeout)
	}
	if cfg.Fleet.Owner == "" {
		cfg.Fleet.Owner = defaultOwner()
	}
	if !utf8.ValidString(cfg.Fleet.Owner) { // a keystore could not store it unchanged
		return fmt.Errorf("%w: Owner is not valid UTF-8", ErrInvalidConfig)
	}
	return nil
}

// Owner returns the owner id this client claims records under (Config.Fleet.Owner or its default;
// "" for a nil Client).
func (c *Client) Owner() string {
	if c == nil {
		return ""
	}
	return c.cfg.Fleet.Owner
}

// lease is the lease a claim made now asks for.
func (c *Client) lease() keystore.Lease {
	now := c.cfg.Now()
	return keystore.Lease{Owner: c.cfg.Fleet.Owner, Now: now, Until: now.Add(c.cfg.Fleet.LeaseTTL)}
}
