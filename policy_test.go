package idem

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/idemkit/idem/outcome"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultPolicy(t *testing.T) {
	want := Policy{
		MaxAttempts:        defaultMaxAttempts,
		MaxElapsed:         defaultMaxElapsed,
		AttemptTimeout:     defaultAttemptTimeout,
		InitialDelay:       defaultInitialDelay,
		Multiplier:         defaultMultiplier,
		Jitter:             defaultJitter,
		MaxDelay:           defaultMaxDelay,
		MaxRetryAfter:      defaultMaxRetryAfter,
		MaxKeyStatusChecks: defaultMaxKeyStatusChecks,
		MaxResponseSize:    defaultMaxResponseSize,
	}
	got := DefaultPolicy()
	assert.Equal(t, want, got)
	require.NoError(t, got.validate())

	// The documented values, so that a changed constant is a visible decision.
	assert.Equal(t, 5, got.MaxAttempts)
	assert.Equal(t, 60*time.Second, got.MaxElapsed)
	assert.Equal(t, 10*time.Second, got.AttemptTimeout)
	assert.Equal(t, 100*time.Millisecond, got.InitialDelay)
	assert.Equal(t, 2.0, got.Multiplier)
	assert.Equal(t, 0.5, got.Jitter)
	assert.Equal(t, 10*time.Second, got.MaxDelay)
	assert.Equal(t, 30*time.Second, got.MaxRetryAfter)
	assert.Equal(t, 5, got.MaxKeyStatusChecks)
	assert.Equal(t, int64(16<<20), got.MaxResponseSize)

	// The zero Policy resolves to the defaults; set fields are kept.
	assert.Equal(t, want, Policy{}.withDefaults())
	custom := Policy{MaxAttempts: 2, Jitter: 0.25, MaxResponseSize: 1}
	resolved := custom.withDefaults()
	assert.Equal(t, 2, resolved.MaxAttempts)
	assert.Equal(t, 0.25, resolved.Jitter)
	assert.Equal(t, int64(1), resolved.MaxResponseSize)
	assert.Equal(t, defaultMaxElapsed, resolved.MaxElapsed)
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*Policy)
		field string // "" means valid
	}{
		{"defaults", func(*Policy) {}, ""},

		{"MaxAttempts 0", func(p *Policy) { p.MaxAttempts = 0 }, "MaxAttempts"},
		{"MaxAttempts -1", func(p *Policy) { p.MaxAttempts = -1 }, "MaxAttempts"},
		{"MaxAttempts 1", func(p *Policy) { p.MaxAttempts = 1 }, ""},
		{"MaxAttempts 100", func(p *Policy) { p.MaxAttempts = 100 }, ""},
		{"MaxAttempts 101", func(p *Policy) { p.MaxAttempts = 101 }, "MaxAttempts"},

		{"MaxElapsed negative", func(p *Policy) { p.MaxElapsed = -time.Second }, "MaxElapsed"},
		{"MaxElapsed 0", func(p *Policy) { p.MaxElapsed = 0 }, "MaxElapsed"},
		{"MaxElapsed 1ns", func(p *Policy) { p.MaxElapsed = 1 }, ""},

		{"AttemptTimeout negative", func(p *Policy) { p.AttemptTimeout = -time.Second }, "AttemptTimeout"},
		{"AttemptTimeout 0", func(p *Policy) { p.AttemptTimeout = 0 }, "AttemptTimeout"},

		{"InitialDelay negative", func(p *Policy) { p.InitialDelay = -time.Millisecond }, "InitialDelay"},
		{"InitialDelay 0", func(p *Policy) { p.InitialDelay = 0 }, ""},

		{"MaxDelay negative", func(p *Policy) { p.MaxDelay = -time.Millisecond }, "MaxDelay"},
		{"MaxDelay 0", func(p *Policy) { p.MaxDelay = 0 }, ""},

		{"Multiplier 0.5", func(p *Policy) { p.Multiplier = 0.5 }, "Multiplier"},
		{"Multiplier 0", func(p *Policy) { p.Multiplier = 0 }, "Multiplier"},
		{"Multiplier NaN", func(p *Policy) { p.Multiplier = math.NaN() }, "Multiplier"},
		{"Multiplier +Inf", func(p *Policy) { p.Multiplier = math.Inf(1) }, "Multiplier"},
		{"Multiplier 101", func(p *Policy) { p.Multiplier = 101 }, "Multiplier"},
		{"Multiplier 1", func(p *Policy) { p.Multiplier = 1 }, ""},
		{"Multiplier 100", func(p *Policy) { p.Multiplier = 100 }, ""},

		{"Jitter -0.1", func(p *Policy) { p.Jitter = -0.1 }, "Jitter"},
		{"Jitter 1.1", func(p *Policy) { p.Jitter = 1.1 }, "Jitter"},
		{"Jitter NaN", func(p *Policy) { p.Jitter = math.NaN() }, "Jitter"},
		{"Jitter 0", func(p *Policy) { p.Jitter = 0 }, ""},
		{"Jitter 1", func(p *Policy) { p.Jitter = 1 }, ""},

		{"MaxRetryAfter negative", func(p *Policy) { p.MaxRetryAfter = -time.Second }, "MaxRetryAfter"},
		{"MaxRetryAfter 0", func(p *Policy) { p.MaxRetryAfter = 0 }, ""},

		{"MaxKeyStatusChecks 0", func(p *Policy) { p.MaxKeyStatusChecks = 0 }, "MaxKeyStatusChecks"},
		{"MaxKeyStatusChecks -1", func(p *Policy) { p.MaxKeyStatusChecks = -1 }, "MaxKeyStatusChecks"},
		{"MaxKeyStatusChecks 100", func(p *Policy) { p.MaxKeyStatusChecks = 100 }, ""},
		{"MaxKeyStatusChecks 101", func(p *Policy) { p.MaxKeyStatusChecks = 101 }, "MaxKeyStatusChecks"},

		{"MaxResponseSize 0", func(p *Policy) { p.MaxResponseSize = 0 }, "MaxResponseSize"},
		{"MaxResponseSize negative", func(p *Policy) { p.MaxResponseSize = -1 }, "MaxResponseSize"},
		{"MaxResponseSize 1", func(p *Policy) { p.MaxResponseSize = 1 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			tt.mod(&p)
			err := p.validate()
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidPolicy)
			assert.Contains(t, err.Error(), tt.field+" = ")
			assert.False(t, errors.Is(err, ErrInvalidConfig))
		})
	}
}

func TestPolicyValidateReportsFirstBadField(t *testing.T) {
	p := DefaultPolicy()
	p.MaxAttempts = 0
	p.Jitter = 2
	err := p.validate()
	require.ErrorIs(t, err, ErrInvalidPolicy)
	assert.Equal(t, "idem: invalid policy: MaxAttempts = 0, want 1..100", err.Error())
}

func TestCallOptions(t *testing.T) {
	base := func() callSettings {
		return callSettings{policy: DefaultPolicy(), statusURL: "/v1/status/{key}"}
	}
	tests := []struct {
		name string
		opt  CallOption
		want func(*callSettings)
	}{
		{"CallMaxAttempts", CallMaxAttempts(1), func(s *callSettings) { s.policy.MaxAttempts = 1 }},
		{"CallMaxAttempts 0 kept for Validate", CallMaxAttempts(0), func(s *callSettings) { s.policy.MaxAttempts = 0 }},
		{"CallMaxElapsed", CallMaxElapsed(3 * time.Second), func(s *callSettings) { s.policy.MaxElapsed = 3 * time.Second }},
		{"CallAttemptTimeout", CallAttemptTimeout(250 * time.Millisecond), func(s *callSettings) { s.policy.AttemptTimeout = 250 * time.Millisecond }},
		{"CallBackoff", CallBackoff(time.Millisecond, 3, 0, 2*time.Second), func(s *callSettings) {
			s.policy.InitialDelay, s.policy.Multiplier, s.policy.Jitter, s.policy.MaxDelay = time.Millisecond, 3, 0, 2*time.Second
		}},
		{"CallMaxRetryAfter", CallMaxRetryAfter(time.Minute), func(s *callSettings) { s.policy.MaxRetryAfter = time.Minute }},
		{"CallMaxRetryAfter 0", CallMaxRetryAfter(0), func(s *callSettings) { s.policy.MaxRetryAfter = 0 }},
		{"CallMaxKeyStatusChecks", CallMaxKeyStatusChecks(9), func(s *callSettings) { s.policy.MaxKeyStatusChecks = 9 }},
		{"CallKeyStatusURL", CallKeyStatusURL("/ops/{key}"), func(s *callSettings) { s.statusURL = "/ops/{key}" }},
		{"CallKeyStatusURL empty turns it off", CallKeyStatusURL(""), func(s *callSettings) { s.statusURL = "" }},
		{"CallNoBudget", CallNoBudget(), func(s *callSettings) { s.noBudget = true }},
		{"CallPolicy zero is the defaults", CallPolicy(Policy{}), func(*callSettings) {}},
		{"CallPolicy fills zero fields", CallPolicy(Policy{MaxAttempts: 2, Jitter: 0.1}), func(s *callSettings) {
			s.policy.MaxAttempts, s.policy.Jitter = 2, 0.1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, want := base(), base()
			tt.opt(&got)
			tt.want(&want)
			assert.Equal(t, want, got)
		})
	}
}

func TestCallOptionsOnNonDefaultSettings(t *testing.T) {
	// CallPolicy replaces the whole policy but keeps the non-policy settings.
	s := callSettings{policy: DefaultPolicy(), statusURL: "/s/{key}", noBudget: true}
	s.policy.MaxAttempts = 9
	CallPolicy(Policy{MaxElapsed: time.Second})(&s)
	want := DefaultPolicy()
	want.MaxElapsed = time.Second
	assert.Equal(t, callSettings{policy: want, statusURL: "/s/{key}", noBudget: true}, s)

	// Later options override earlier ones.
	s = callSettings{policy: DefaultPolicy()}
	for _, o := range []CallOption{CallMaxAttempts(2), CallMaxAttempts(3)} {
		o(&s)
	}
	assert.Equal(t, 3, s.policy.MaxAttempts)
}

func TestStatusCallOptions(t *testing.T) {
	f := func(context.Context, outcome.KeyStatusRequest) (outcome.KeyStatus, error) {
		return outcome.KeyStatus{State: outcome.KeyStatusNotFound}, nil
	}

	s := callSettings{policy: DefaultPolicy(), statusURL: "/s/{key}"}
	CallKeyStatusFunc(f)(&s)
	require.NotNil(t, s.status)
	st, err := s.status(context.Background(), outcome.KeyStatusRequest{})
	require.NoError(t, err)
	assert.Equal(t, outcome.KeyStatusNotFound, st.State)
	assert.Equal(t, "/s/{key}", s.statusURL, "CallKeyStatusFunc leaves the URL")
	assert.Equal(t, DefaultPolicy(), s.policy)
	assert.False(t, s.noBudget)

	// CallKeyStatusURL after CallKeyStatusFunc drops the func.
	CallKeyStatusURL("/t/{key}")(&s)
	assert.Nil(t, s.status)
	assert.Equal(t, "/t/{key}", s.statusURL)
}
