package outcome

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// raNow is the fixed clock of the Retry-After tests: 120 s before the RFC 9110 example date
// Sun, 06 Nov 1994 08:49:37 GMT.
var raNow = time.Date(1994, time.November, 6, 8, 47, 37, 0, time.UTC)

const raMax = maxRetryAfterSeconds * time.Second

func TestParseRetryAfter(t *testing.T) {
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		// delay-seconds
		{"zero", "0", 0, true},
		{"seconds", "120", 120 * time.Second, true},
		{"one", "1", time.Second, true},
		{"trimmed", " 5 ", 5 * time.Second, true},
		{"tabs trimmed", "\t7\t", 7 * time.Second, true},
		{"CRLF is not OWS", "\t7\r\n", 0, false},
		{"NBSP is not OWS", "\u00a07", 0, false},
		{"leading zeros", "0007", 7 * time.Second, true},
		{"exactly the ceiling", "3153600000", raMax, true},
		{"one above the ceiling saturates", "3153600001", raMax, true},
		{"max int64 saturates", "9223372036854775807", raMax, true},
		{"20 digits saturate", "99999999999999999999", raMax, true},
		{"400 digits saturate", strings.Repeat("9", 400), raMax, true},
		{"400 digits of leading zeros then 3", strings.Repeat("0", 400) + "3", 3 * time.Second, true},

		// HTTP-date, the three RFC 9110 §5.6.7 forms, 120 s after raNow
		{"IMF-fixdate", "Sun, 06 Nov 1994 08:49:37 GMT", 120 * time.Second, true},
		{"RFC 850", "Sunday, 06-Nov-94 08:49:37 GMT", 120 * time.Second, true},
		{"asctime", "Sun Nov  6 08:49:37 1994", 120 * time.Second, true},
		{"IMF-fixdate trimmed", "  Sun, 06 Nov 1994 08:49:37 GMT ", 120 * time.Second, true},
		{"IMF-fixdate next day", "Mon, 07 Nov 1994 08:47:37 GMT", 24 * time.Hour, true},
		{"date equal to now", "Sun, 06 Nov 1994 08:47:37 GMT", 0, true},
		{"past IMF-fixdate", "Sun, 06 Nov 1994 08:47:36 GMT", 0, true},
		{"past RFC 850", "Saturday, 05-Nov-94 08:49:37 GMT", 0, true},
		{"past asctime", "Thu Jan  1 00:00:00 1970", 0, true},
		{"far future beyond 100 years", "Tue, 01 Jan 2150 00:00:00 GMT", raMax, true},
		{"far future beyond time.Duration range", "Fri, 31 Dec 9999 23:59:59 GMT", raMax, true},

		// malformed: fall back to backoff
		{"empty", "", 0, false},
		{"blank", "   ", 0, false},
		{"negative", "-5", 0, false},
		{"plus sign", "+3", 0, false},
		{"fraction", "1.5", 0, false},
		{"letters", "abc", 0, false},
		{"unit suffix", "5s", 0, false},
		{"exponent", "1e3", 0, false},
		{"hex", "0x10", 0, false},
		{"inner space", "1 2", 0, false},
		{"fullwidth digit", "５", 0, false},
		{"date in a non-GMT zone", "Sun, 06 Nov 1994 08:49:37 PST", 0, false},
		{"ISO 8601", "1994-11-06T08:49:37Z", 0, false},
		{"truncated date", "Sun, 06 Nov 1994", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tt.value, raNow)
			assert.Equal(t, tt.wantOK, ok, "ok")
			assert.Equal(t, tt.want, got, "duration")
		})
	}
}

func TestParseRetryAfterDateFormsAgree(t *testing.T) {
	// The three forms name the same instant, so they must give the same wait for any now.
	forms := []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
	}
	for _, now := range []time.Time{
		time.Date(1994, time.November, 6, 8, 49, 36, 500_000_000, time.UTC), // sub-second now
		time.Date(1994, time.November, 5, 8, 49, 37, 0, time.UTC),
		time.Date(1994, time.November, 6, 9, 49, 37, 0, time.FixedZone("CET", 3600)), // same instant as 08:49:37Z
	} {
		want := time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC).Sub(now)
		if want < 0 {
			want = 0
		}
		for _, f := range forms {
			got, ok := ParseRetryAfter(f, now)
			require.True(t, ok, f)
			require.Equal(t, want, got, "%s at %s", f, now)
		}
	}
}

func TestParseRetryAfterSaturationIsBelowOverflow(t *testing.T) {
	// The ceiling must itself be representable and far from time.Duration's limit.
	require.Equal(t, int64(3_153_600_000), int64(maxRetryAfterSeconds))
	require.Greater(t, int64(raMax), int64(0))
	require.Equal(t, int64(maxRetryAfterSeconds), int64(raMax/time.Second))
}
