package profile

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEveryProfileIsValid(t *testing.T) {
	names := map[string]bool{}
	for _, p := range All() {
		require.NoError(t, p.Validate(), p.Name)
		names[p.Name] = true
		got, err := ByName(p.Name)
		require.NoError(t, err)
		assert.Equal(t, p.Name, got.Name)
		assert.NotEmpty(t, p.Sources, "%s names its sources", p.Name)
	}
	assert.Len(t, names, 10)
	_, err := ByName("nope")
	require.ErrorIs(t, err, ErrInvalid)
}

// The figures that keep a customer from being charged twice, as DIALECTS.md has them.
func TestProviderFigures(t *testing.T) {
	assert.Equal(t, 6*time.Hour, PayPal.Retention)
	assert.Equal(t, "PayPal-Request-Id", PayPal.KeyHeader)
	assert.Equal(t, ReplayNothingOnError, Checkout.Replay)
	assert.Equal(t, "Cko-Idempotency-Key", Checkout.KeyHeader)
	assert.Equal(t, SearchByReference, Checkout.Settle[0].Kind, "Checkout.com: the search comes before any resend")
	assert.Equal(t, "idempotency_key", Square.KeyField)
	assert.Equal(t, 64, Adyen.MaxKeyLength)
	assert.Equal(t, time.Minute, Stripe.Settle[1].Lag)
	assert.Equal(t, ReplayCurrent, StripeV2.Replay)
	assert.Equal(t, ReplayStored, Stripe.Replay, "StripeV2 is a copy, not an alias")
}

func TestValidate(t *testing.T) {
	ok := Profile{Name: "x", KeyHeader: "K"}
	tests := []struct {
		name string
		mod  func(*Profile)
	}{
		{"no name", func(p *Profile) { p.Name = "" }},
		{"no carrier", func(p *Profile) { p.KeyHeader = "" }},
		{"two carriers", func(p *Profile) { p.KeyField = "k" }},
		{"bad header", func(p *Profile) { p.KeyHeader = "a b" }},
		{"negative retention", func(p *Profile) { p.Retention = -1 }},
		{"rule without condition", func(p *Profile) { p.Rules = []Rule{{Meaning: Retry}} }},
		{"rule without meaning", func(p *Profile) { p.Rules = []Rule{{Status: 409}} }},
		{"done without pointer", func(p *Profile) { p.Rules = []Rule{{Status: 409, Meaning: Done}} }},
		{"search without placeholder", func(p *Profile) { p.Settle = []Route{{Kind: SearchByReference, Path: "/s"}} }},
		{"cancel without body", func(p *Profile) { p.Settle = []Route{{Kind: CancelByReference, Path: "/c"}} }},
		{"unknown route", func(p *Profile) { p.Settle = []Route{{Kind: 99}} }},
		{"resend before search where nothing is cached", func(p *Profile) {
			p.Replay = ReplayNothingOnError
			p.Settle = []Route{{Kind: Resend}, {Kind: SearchByReference, Path: "/s?r={reference}"}}
		}},
	}
	require.NoError(t, ok.Validate())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ok.Clone()
			tt.mod(&p)
			require.ErrorIs(t, p.Validate(), ErrInvalid)
		})
	}
}

func TestRuleMatches(t *testing.T) {
	body := []byte(`{"error":{"type":"idempotency_error"},"errors":[{"code":"A"},{"code":"B"}],"n":704}`)
	h := http.Header{"Transient-Error": {"true"}}
	tests := []struct {
		r      Rule
		status int
		header http.Header
		want   bool
	}{
		{Rule{Field: "error.type", Value: "idempotency_error"}, 400, nil, true},
		{Rule{Field: "error.type", Value: "idempotency_error"}, 200, nil, false},
		{Rule{Field: "errors.code", Value: "B"}, 400, nil, true},
		{Rule{Field: "n", Value: "704"}, 422, nil, true},
		{Rule{Status: 409, Field: "n", Value: "704"}, 422, nil, false},
		{Rule{MinStatus: 500, MaxStatus: 599, Header: "transient-error", HeaderValue: "true"}, 500, h, true},
		{Rule{MinStatus: 500, MaxStatus: 599, Header: "transient-error"}, 500, h, false},
		{Rule{MinStatus: 500, MaxStatus: 599, Header: "transient-error"}, 503, nil, true},
		{Rule{Field: "missing", Value: ""}, 400, nil, false},
	}
	for i, tt := range tests {
		assert.Equal(t, tt.want, tt.r.Matches(tt.status, tt.header, body), "case %d", i)
	}
	v, ok := Value([]byte(`not json`), "a")
	assert.False(t, ok)
	assert.Empty(t, v)
	v, ok = Value(body, "errors.code")
	assert.True(t, ok)
	assert.Equal(t, "A", v)
}

func FuzzValue(f *testing.F) {
	f.Add([]byte(`{"a":[{"b":1}]}`), "a.b")
	f.Add([]byte(`[[[]]]`), "")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		_, _ = Value(body, path)
		_ = Rule{Field: path, Value: "x", Header: "H"}.Matches(400, http.Header{}, body)
	})
}
