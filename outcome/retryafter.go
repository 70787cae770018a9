package outcome

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// maxRetryAfterSeconds keeps delay-seconds far below time.Duration's overflow (about 292
// years); anything larger is "longer than any cap" and is reported as this many seconds.
const maxRetryAfterSeconds = 100 * 365 * 24 * 3600

// ParseRetryAfter reads a Retry-After header value (RFC 9110 §10.2.3) relative to now. It
// accepts delay-seconds (a non-negative decimal integer, any length: huge values saturate at
// about 100 years instead of overflowing) and an HTTP-date in all three RFC 9110 §5.6.7 forms
// (IMF-fixdate, obsolete RFC 850 and ANSI C asctime). A date in the past gives 0. It returns
// ok=false for an empty, negative or malformed value, which means "fall back to backoff".
func ParseRetryAfter(value string, now time.Time) (d time.Duration, ok bool) {
	v := strings.Trim(value, " \t") // OWS is SP and HTAB (RFC 9110 §5.6.3)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		secs := int64(0)
		for i := 0; i < len(v); i++ {
			secs = secs*10 + int64(v[i]-'0')
			if secs > maxRetryAfterSeconds {
				secs = maxRetryAfterSeconds
				break
			}
		}
		return time.Duration(secs) * time.Second, true
	}
	// http.ParseTime tries IMF-fixdate, RFC 850 and asctime, the three forms RFC 9110 names.
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	wait := t.Sub(now)
	switch {
	case wait <= 0:
		return 0, true
	case wait == math.MaxInt64: // Sub saturates; keep the same ceiling as delay-seconds
		return maxRetryAfterSeconds * time.Second, true
	}
	return min(wait, maxRetryAfterSeconds*time.Second), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
