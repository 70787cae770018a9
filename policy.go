package idem

import (
	"fmt"
	"time"

	"github.com/idemkit/idem/outcome"
)

// Policy defaults. A zero field in Config.Policy means the default below.
const (
	defaultMaxAttempts        = 5                      // requests sent per call, first one included
	defaultMaxElapsed         = 60 * time.Second       // wall time of one call, waits included
	defaultAttemptTimeout     = 10 * time.Second       // one request, headers and body read
	defaultInitialDelay       = 100 * time.Millisecond // first backoff delay before jitter
	defaultMaxDelay           = 10 * time.Second       // hard ceiling of one backoff delay, after jitter
	defaultMultiplier         = 2.0                    // growth of the backoff delay per retry
	defaultJitter             = 0.5                    // randomization factor: delay * [1-j, 1+j]
	defaultMaxRetryAfter      = 30 * time.Second       // longest Retry-After honoured
	defaultMaxKeyStatusChecks = 5                      // status-endpoint asks per unknown outcome
	defaultMaxResponseSize    = 16 << 20               // bytes of a response body read into memory
)

// Upper bounds that Validate enforces, so that a typo cannot make a call run for days.
const (
	maxAttemptsLimit     = 100
	maxStatusChecksLimit = 100
	maxMultiplier        = 100
	maxResponseSizeLimit = 1 << 30 // 1 GiB: a body is held in memory and persisted
)

// Policy bounds the retries of one call. The zero value means every default; per-call
// options (CallMaxAttempts, ...) override single fields for one call only.
type Policy struct {
	// MaxAttempts is the most requests sent per call, the first included (1 = no retry).
	// Default 5; at most 100.
	MaxAttempts int
	// MaxElapsed bounds a call's total time, waits included. A retry or backoff wait that would
	// end after it is not started (ErrExhausted; a Retry-After longer than the time left stops
	// the call with ErrRetryAfterTooLong); an attempt or status check already under way runs
	// to its own AttemptTimeout. Default 60 s.
	MaxElapsed time.Duration
	// AttemptTimeout bounds one request from send to the last body byte. A timeout after the
	// request was written is an unknown outcome. Default 10 s. It must be
	// shorter than Config.Fleet.LeaseTTL, whatever the store, so that no attempt outlives
	// the record's lease. LeaseTTL left zero follows it (30 s, or three times this value
	// when longer); a LeaseTTL set explicitly and not longer is ErrInvalidConfig from
	// NewClient, and a per-call CallAttemptTimeout not shorter than the client's LeaseTTL
	// is ErrInvalidPolicy from Do, which then sends nothing.
	AttemptTimeout time.Duration
	// InitialDelay, Multiplier, Jitter and MaxDelay shape the exponential backoff
	// (cenkalti/backoff): delay n is InitialDelay*Multiplier^n randomized by ±Jitter, then
	// capped at MaxDelay.
	InitialDelay time.Duration // first delay before jitter; default 100ms
	Multiplier   float64       // growth per retry, 1..100; default 2
	Jitter       float64       // randomization factor, at most 1; 0 means 0.5; NoJitter (-1) none
	MaxDelay     time.Duration // hard ceiling of one delay, after jitter; default 10s
	// MaxRetryAfter is the longest server-requested wait (Retry-After) idem honours; a longer
	// one stops the call with ErrRetryAfterTooLong. Default 30 s.
	MaxRetryAfter time.Duration
	// MaxKeyStatusChecks bounds the status-endpoint asks made to resolve one unknown outcome.
	// When all of them say "processing", the key is resent (outcome.KeyStatusProcessing); otherwise
	// the call ends with ErrOutcomeUnknown. Default 5.
	MaxKeyStatusChecks int
	// MaxResponseSize bounds the bytes of one response body read into memory. A larger
	// answer is not read past the bound: the attempt's outcome is unknown (the request may
	// have executed), so the status endpoint is asked, and its report of the stored answer
	// (read up to 4 MiB plus six times this bound) is the result. Default 16 MiB;
	// at most 1 GiB.
	MaxResponseSize int64
}

// DefaultPolicy returns the policy used when Config.Policy is the zero value.
func DefaultPolicy() Policy {
	return Policy{}.withDefaults()
}

// NoJitter as Policy.Jitter (or in CallBackoff) turns jitter off; a zero Jitter means
// defaultJitter, so that the zero Policy is the default one.
const NoJitter = -1.0

// withDefaults fills zero fields.
func (p Policy) withDefaults() Policy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = defaultMaxAttempts
	}
	if p.MaxElapsed == 0 {
		p.MaxElapsed = defaultMaxElapsed
	}
	if p.AttemptTimeout == 0 {
		p.AttemptTimeout = defaultAttemptTimeout
	}
	if p.InitialDelay == 0 {
		p.InitialDelay = defaultInitialDelay
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = defaultMaxDelay
	}
	if p.Multiplier == 0 {
		p.Multiplier = defaultMultiplier
	}
	switch p.Jitter {
	case 0:
		p.Jitter = defaultJitter
	case NoJitter:
		p.Jitter = 0
	}
	if p.MaxRetryAfter == 0 {
		p.MaxRetryAfter = defaultMaxRetryAfter
	}
	if p.MaxKeyStatusChecks == 0 {
		p.MaxKeyStatusChecks = defaultMaxKeyStatusChecks
	}
	if p.MaxResponseSize == 0 {
		p.MaxResponseSize = defaultMaxResponseSize
	}
	return p
}

// validate reports the first out-of-range field of a resolved policy: one whose zero fields
// were already replaced by defaults (as NewClient does, or DefaultPolicy gives), so a zero
// Policy{} itself is invalid here. The error matches ErrInvalidPolicy and names the field
// and value.
func (p Policy) validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: %s = %v, want %s", ErrInvalidPolicy, field, v, want)
	}
	switch {
	case p.MaxAttempts < 1 || p.MaxAttempts > maxAttemptsLimit:
		return bad("MaxAttempts", p.MaxAttempts, fmt.Sprintf("1..%d", maxAttemptsLimit))
	case p.MaxElapsed <= 0:
		return bad("MaxElapsed", p.MaxElapsed, "> 0")
	case p.AttemptTimeout <= 0:
		return bad("AttemptTimeout", p.AttemptTimeout, "> 0")
	case p.InitialDelay < 0:
		return bad("InitialDelay", p.InitialDelay, ">= 0")
	case p.MaxDelay < 0:
		return bad("MaxDelay", p.MaxDelay, ">= 0")
	case !(p.Multiplier >= 1 && p.Multiplier <= maxMultiplier): // also rejects NaN
		return bad("Multiplier", p.Multiplier, fmt.Sprintf("1..%d", maxMultiplier))
	case !(p.Jitter >= 0 && p.Jitter <= 1):
		return bad("Jitter", p.Jitter, "0..1")
	case p.MaxRetryAfter < 0:
		return bad("MaxRetryAfter", p.MaxRetryAfter, ">= 0")
	case p.MaxKeyStatusChecks < 1 || p.MaxKeyStatusChecks > maxStatusChecksLimit:
		return bad("MaxKeyStatusChecks", p.MaxKeyStatusChecks, fmt.Sprintf("1..%d", maxStatusChecksLimit))
	case p.MaxResponseSize <= 0 || p.MaxResponseSize > maxResponseSizeLimit:
		return bad("MaxResponseSize", p.MaxResponseSize, fmt.Sprintf("1..%d bytes", maxResponseSizeLimit))
	}
	return nil
}

// CallOption overrides the client's policy or settings for one call only. Unlike a zero
// field of Policy (which takes the default), a value given to a Call option is used as
// given: out of range is ErrInvalidPolicy from Do, which then sends nothing.
type CallOption func(*callSettings)

// callSettings is what one call runs with: the client's defaults, then the options.
type callSettings struct {
	policy    Policy
	statusURL string
	status    outcome.KeyStatusFunc
	noBudget  bool
}

// CallPolicy replaces the whole policy for this call; zero fields take the defaults.
func CallPolicy(p Policy) CallOption {
	return func(s *callSettings) { s.policy = p.withDefaults() }
}

// CallMaxAttempts sets Policy.MaxAttempts for this call (1 = no retry; 0 is an error).
func CallMaxAttempts(n int) CallOption { return func(s *callSettings) { s.policy.MaxAttempts = n } }

// CallMaxElapsed sets Policy.MaxElapsed for this call (> 0; 0 is ErrInvalidPolicy).
func CallMaxElapsed(d time.Duration) CallOption {
	return func(s *callSettings) { s.policy.MaxElapsed = d }
}

// CallAttemptTimeout sets Policy.AttemptTimeout for this call (> 0). It must be shorter than
// Config.Fleet.LeaseTTL, as the client-wide value must: otherwise Do returns ErrInvalidPolicy and
// sends nothing.
func CallAttemptTimeout(d time.Duration) CallOption {
	return func(s *callSettings) { s.policy.AttemptTimeout = d }
}

// CallBackoff sets the backoff schedule for this call: initial delay, multiplier (>= 1),
// jitter (randomization factor in [0, 1]; 0 or NoJitter means none, unlike Policy.Jitter,
// where 0 means the default) and the hard ceiling of one delay.
func CallBackoff(initial time.Duration, multiplier, jitter float64, maxDelay time.Duration) CallOption {
	return func(s *callSettings) {
		if jitter == NoJitter {
			jitter = 0
		}
		s.policy.InitialDelay, s.policy.Multiplier = initial, multiplier
		s.policy.Jitter, s.policy.MaxDelay = jitter, maxDelay
	}
}

// CallMaxRetryAfter sets Policy.MaxRetryAfter for this call (>= 0; 0 means any positive
// Retry-After stops the call with ErrRetryAfterTooLong; negative is ErrInvalidPolicy).
func CallMaxRetryAfter(d time.Duration) CallOption {
	return func(s *callSettings) { s.policy.MaxRetryAfter = d }
}

// CallMaxKeyStatusChecks sets Policy.MaxKeyStatusChecks for this call (1..100; 0 is
// ErrInvalidPolicy).
func CallMaxKeyStatusChecks(n int) CallOption {
	return func(s *callSettings) { s.policy.MaxKeyStatusChecks = n }
}

// CallKeyStatusURL sets the status endpoint path for this call ("{key}" is replaced by the
// escaped key); "" turns the status check off for this call.
func CallKeyStatusURL(path string) CallOption {
	return func(s *callSettings) { s.statusURL, s.status = path, nil }
}

// CallKeyStatusFunc asks f instead of the default status endpoint for this call.
func CallKeyStatusFunc(f outcome.KeyStatusFunc) CallOption {
	return func(s *callSettings) { s.status = f }
}

// CallNoBudget lets this call retry even when the client's retry budget is empty. Use it for
// the rare call that must go on during an outage. Its retries take no tokens; its success
// counts as healthy traffic like any other (a first-attempt refund).
func CallNoBudget() CallOption { return func(s *callSettings) { s.noBudget = true } }
