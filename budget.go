package idem

import (
	"fmt"
	"sync"
	"time"
)

// Retry budget defaults, after aws-sdk-go-v2's aws/retry quota (RetryCost 5, RetryTimeoutCost
// 10, NoRetryIncrement 1, capacity 500).
const (
	defaultBudgetCapacity      = 500 // tokens in a full bucket
	defaultBudgetRetryCost     = 5   // tokens one retry takes
	defaultBudgetUnknownCost   = 10  // tokens a retry after a timeout or unknown outcome takes
	defaultBudgetSuccessRefund = 1   // tokens a first-attempt success puts back
)

// resendFloor is the rate the retry budget never throttles resumed records below: when the
// bucket cannot pay, one resumed record that was sent before may still be resent per
// resendFloor (by Config.Now). Tokens come back only with answers and first-attempt
// successes, so a client whose only traffic is its pending records (a worker retrying its
// own intents, a fleet instance that only reclaims) would otherwise never send them again
// after an outage drained the bucket. One resend a second per client bounds what a fleet adds
// to an outage, and each one that succeeds puts one more resend's worth back, so the rest
// follow at the pace successes come. After Finagle's retry budget (its minimum retries
// per second).
const resendFloor = time.Second

// BudgetConfig configures the client-wide retry budget, a token bucket shared by every call of
// a Client: each retry takes tokens, successes put them back, and an empty bucket means calls
// make their first attempt but no retry (ErrBudgetExhausted). So a fleet of clients cannot
// multiply an outage's load. The zero value enables it with the defaults.
type BudgetConfig struct {
	Disabled      bool // no budget: only the policy bounds retries
	Capacity      int  // default 500
	RetryCost     int  // default 5
	UnknownCost   int  // default 10
	SuccessRefund int  // default 1
}

// retryBudget is a retry token bucket. A retry takes a token, and so does the first send of a
// resumed record that was sent before (Do of a pending intent, Recover, the reclaimer): it
// resends the intent. A call that ends with a definitive answer from the server after
// retries (a success, a permanent failure, a key conflict, a stored 5xx) returns the tokens
// its retries took, and a resumed record's resend that succeeds one more resend's worth; a
// success at the first attempt adds SuccessRefund. Calls that stop without an answer (outage, exhausted
// attempts) keep their tokens spent. With an empty bucket, one resumed record's resend per
// resendFloor still goes. Safe for concurrent use.
type retryBudget struct {
	cfg       BudgetConfig
	mu        sync.Mutex
	available int
	lastFloor time.Time // the last resend the floor paid for (resendFloor)
}

// newRetryBudget returns a full bucket, or nil when cfg.Disabled. Negative values give an error
// matching ErrInvalidConfig.
func newRetryBudget(cfg BudgetConfig) (*retryBudget, error) {
	if cfg.Disabled {
		return nil, nil
	}
	if cfg.Capacity < 0 || cfg.RetryCost < 0 || cfg.UnknownCost < 0 || cfg.SuccessRefund < 0 {
		return nil, fmt.Errorf("%w: retry budget values must not be negative: %+v", ErrInvalidConfig, cfg)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.Capacity, defaultBudgetCapacity)
	def(&cfg.RetryCost, defaultBudgetRetryCost)
	def(&cfg.UnknownCost, defaultBudgetUnknownCost)
	def(&cfg.SuccessRefund, defaultBudgetSuccessRefund)
	return &retryBudget{cfg: cfg, available: cfg.Capacity}, nil
}

// tokens returns the tokens left (0 for a nil budget).
func (b *retryBudget) tokens() int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.available
}

// take spends the cost of one retry for cl; false means the bucket cannot pay.
func (b *retryBudget) take(cl *call, unknown bool) bool {
	if b == nil {
		return true
	}
	cost := b.cfg.RetryCost
	if unknown {
		cost = b.cfg.UnknownCost
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.available < cost {
		return false
	}
	b.available -= cost
	cl.spent += cost
	return true
}

// resendBonus is what a success of a resumed record's resend puts back beyond its own cost:
// one more resend's worth. The server executes again, so the pending records an outage left
// are resent at the pace successes come back (each pays for the next), starting from the
// floor's one a second, instead of one a second for good. Only a success earns it: during an
// outage that still answers (a 401, a 422 from a broken dependency) refusals would otherwise
// fill the bucket that then pays for retries into the outage (adversarial run).
func (b *retryBudget) resendBonus(cl *call) int {
	if !cl.resumedResend {
		return 0
	}
	cl.resumedResend = false
	return b.cfg.RetryCost
}

// takeResend is take for the first send of a resumed record sent before: when the bucket
// cannot pay, the floor lets one such resend through per resendFloor (by now).
func (b *retryBudget) takeResend(cl *call, unknown bool, now time.Time) bool {
	if b.take(cl, unknown) {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.floorLocked(now, true)
}

// resendPossible reports whether takeResend would let any resumed resend through at now
// (the tokens for the costlier kind, after an unknown outcome, or the floor due), without
// taking anything: the reclaimer claims no record that it could only hand back denied after
// its status checks (the orphans it takes are mostly unknown outcomes).
func (b *retryBudget) resendPossible(now time.Time) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.available >= max(b.cfg.RetryCost, b.cfg.UnknownCost) || b.floorLocked(now, false)
}

// floorLocked reports whether the floor is due at now, and with use spends it. A clock that
// stepped back before the last use makes it due: a step must not stall resends for as long.
func (b *retryBudget) floorLocked(now time.Time, use bool) bool {
	if !b.lastFloor.IsZero() && now.Before(b.lastFloor.Add(resendFloor)) && !now.Before(b.lastFloor) {
		return false
	}
	if use {
		b.lastFloor = now
	}
	return true
}

// succeeded refunds a successful call: what its retries took, or SuccessRefund.
func (b *retryBudget) succeeded(cl *call) {
	if b == nil {
		return
	}
	refund := cl.spent
	if refund == 0 {
		refund = b.cfg.SuccessRefund
	}
	refund += b.resendBonus(cl)
	cl.spent = 0
	b.mu.Lock()
	defer b.mu.Unlock()
	b.available = min(b.cfg.Capacity, b.available+refund)
}

// answered gives back what cl's retries took when the server gave a definitive answer that is
// not a success (a permanent failure, a key conflict, a stored 5xx): the retries reached a
// server that answers, so a run of such calls must not drain the bucket for good.
func (b *retryBudget) answered(cl *call) {
	if b == nil || cl.spent == 0 {
		return
	}
	refund := cl.spent // no resendBonus: answers that refuse must not fill the bucket
	cl.spent = 0
	b.mu.Lock()
	defer b.mu.Unlock()
	b.available = min(b.cfg.Capacity, b.available+refund)
}
