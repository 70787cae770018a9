package main

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/keystore"
)

// show after a resolution prints the note as the resolution and the error from before it as
// history; the internal not-executed flag appears only when set, for what it means.
func TestShowResolvedAndFlag(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	resolvedRec := &keystore.Record{Key: "k1", State: keystore.StateFailed, Reason: keystore.ReasonNotExecuted,
		Error: "execution began, effect unknown", Note: "no charge found, ticket 8", CreatedAt: at, UpdatedAt: at}
	pending := &keystore.Record{Key: "k2", State: keystore.StatePending, NotExecuted: true,
		Error: "503 Service Unavailable", CreatedAt: at, UpdatedAt: at}
	tests := []struct {
		name    string
		rec     *keystore.Record
		want    []string // line regexps
		notWant []string
	}{
		{"resolved not executed", resolvedRec,
			[]string{`(?m)^reason +not_executed$`, `(?m)^resolution +no charge found, ticket 8$`,
				`(?m)^before it +execution began, effect unknown$`},
			[]string{`(?m)^error `, `(?m)^note `, `not executed`, `(?m)^last call`}},
		{"pending, last call knew nothing was executed", pending,
			[]string{`(?m)^error +503 Service Unavailable$`, `(?m)^note +-$`, `(?m)^last call +knew nothing was executed$`},
			[]string{`(?m)^resolution`, `not executed`}},
		{"pending, flag unset", &keystore.Record{Key: "k3", State: keystore.StatePending, CreatedAt: at, UpdatedAt: at},
			[]string{`(?m)^error +-$`, `(?m)^attempts +0 \(an attempt a crash cut short is not counted: it may have reached the server\)$`},
			[]string{`(?m)^last call`, `not executed`, `false`}},
		// The lease is shown while held (now is at+1m), not after its expiry.
		{"lease held", &keystore.Record{Key: "k4", State: keystore.StatePending, CreatedAt: at, UpdatedAt: at,
			Owner: "host-a", LeaseUntil: at.Add(2 * time.Minute), Fence: 3},
			[]string{`(?m)^lease +host-a until 2026-03-01T12:02:00Z, fence 3$`}, nil},
		{"lease expired", &keystore.Record{Key: "k5", State: keystore.StateFailed, CreatedAt: at, UpdatedAt: at,
			Owner: "host-a", LeaseUntil: at.Add(30 * time.Second), Fence: 1},
			nil, []string{`(?m)^lease`, `host-a`}},
		{"lease ending now", &keystore.Record{Key: "k6", State: keystore.StatePending, CreatedAt: at, UpdatedAt: at,
			Owner: "host-a", LeaseUntil: at.Add(time.Minute), Fence: 1},
			nil, []string{`(?m)^lease`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			require.NoError(t, writeRecord(&b, tt.rec, at.Add(time.Minute)))
			for _, re := range tt.want {
				assert.Regexp(t, re, b.String())
			}
			for _, re := range tt.notWant {
				assert.NotRegexp(t, re, b.String())
			}
		})
	}
}

// stats prints "-" for the oldest of a state with no records, and the age otherwise.
func TestStatsOldestNone(t *testing.T) {
	var b strings.Builder
	require.NoError(t, writeStats(&b, statsOut{Records: idemadmin.RecordStats{Total: 1,
		ByState: map[keystore.State]int{keystore.StateManual: 1}, OldestManualSeconds: new(int64(90))}}))
	assert.Contains(t, b.String(), "oldest pending  -\n")
	assert.Contains(t, b.String(), "oldest manual   1m30s\n")
}

// ls and recover print tenants, intents and reasons whole while they fit in 100 columns,
// and narrow the widest column first when they do not.
func TestTenantColumnWidth(t *testing.T) {
	key := "0f8fad5b-d9cb-469f-a165-70867728950e"
	recs := []idemadmin.Record{
		{Scope: "acct_demo_eu", Intent: "order-000123", Key: key, State: keystore.StateManual, LastStatusCode: 500,
			Reason: "stored_server_error", AgeSeconds: 30},
		{Key: key, State: keystore.StatePending},
	}
	var b strings.Builder
	require.NoError(t, writeTable(&b, recs))
	require.NoError(t, writeRecover(&b, recoverOut{Records: []recoveredEntry{{Record: recs[0], Error: "outcome unknown"}}}))
	out := b.String()
	assert.Regexp(t, `(?m)^manual +30s +500 +acct_demo_eu order-000123 `+key+` stored_server_error$`, out)
	assert.Regexp(t, `(?m)^manual +acct_demo_eu order-000123 `+key+`\n`+`error of `+key+`: outcome unknown$`, out)
	for _, line := range strings.Split(out, "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(line), 100, line)
	}

	assert.Equal(t, []int{9, 12, 18}, fitWidths(39, 9, 12, 19), "the widest column gives way first")
	assert.Equal(t, []int{13, 13, 13}, fitWidths(39, 40, 30, 20))
	assert.Equal(t, []int{6, 6, 19}, fitWidths(39, 6, 6, 19))
}

// show clipped bodies to 84 runes though its help said "bodies included" (newcomer run):
// they are the evidence an operator settles a record on, printed whole (wrapped), with
// control characters quoted and bytes that are not text described.
func TestShowPrintsBodiesWhole(t *testing.T) {
	long := `{"amount":1250,"currency":"EUR","customer":"cus_1","reference":"order-4242-4242","description":"a body longer than the 84 runes a value gets"}`
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := &keystore.Record{Key: "k1", State: keystore.StateSucceeded, CreatedAt: at, UpdatedAt: at,
		Request:  keystore.Request{Method: "POST", URL: "/v1/payments", Body: []byte(long)},
		Response: &keystore.Response{StatusCode: 201, Body: []byte("{\n\t\"id\": \"ch_1\"\n}")}}
	var b strings.Builder
	require.NoError(t, writeRecord(&b, rec, at))
	assert.Contains(t, b.String(), "  body       "+long[:84]+"\n             "+long[84:]+"\n")
	assert.Contains(t, b.String(), "  body       {  \"id\": \"ch_1\" }\n")

	for _, tc := range []struct{ body, want string }{
		{"", "-"},
		{"ok\x1b[2Jgone", `"ok\x1b[2Jgone"`},
		{"\xff\xfe", "(2 bytes, not UTF-8 text: -json has them, base64)"},
		{"plain", "plain"},
	} {
		assert.Equal(t, tc.want, bodyText([]byte(tc.body)), "%q", tc.body)
	}
}
