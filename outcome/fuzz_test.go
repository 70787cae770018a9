package outcome

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{
		"0", "120", " 5 ", "0007", "3153600000", "3153600001", "9223372036854775807",
		"99999999999999999999", strings.Repeat("9", 400),
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Fri, 31 Dec 9999 23:59:59 GMT", "Thu, 01 Jan 1970 00:00:00 GMT", "Sunday, 06-Nov-94 08:49:37 PST",
		"", " ", "-5", "+3", "1.5", "abc", "5s", "1e3", "\u0665", "٣",
	} {
		f.Add(s)
	}
	now := time.Date(2024, time.March, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, now)
		if !ok {
			if d != 0 {
				t.Fatalf("ParseRetryAfter(%q) = %v, false: a failed parse must give 0", v, d)
			}
		} else if d < 0 || d > maxRetryAfterSeconds*time.Second {
			t.Fatalf("ParseRetryAfter(%q) = %v, out of [0, %v]", v, d, maxRetryAfterSeconds*time.Second)
		}
		trimmed := strings.Trim(v, " \t") // RFC 9110 OWS only
		if trimmed != "" && strings.Trim(trimmed, "0123456789") == "" {
			if !ok {
				t.Fatalf("ParseRetryAfter(%q): pure digits must parse", v)
			}
			if n, err := strconv.ParseInt(trimmed, 10, 64); err == nil && n <= maxRetryAfterSeconds {
				if want := time.Duration(n) * time.Second; d != want {
					t.Fatalf("ParseRetryAfter(%q) = %v, want %v", v, d, want)
				}
			} else if d != maxRetryAfterSeconds*time.Second {
				t.Fatalf("ParseRetryAfter(%q) = %v, want the saturated %v", v, d, maxRetryAfterSeconds*time.Second)
			}
		}
		// The result depends on now only through a date: a later now never asks for a longer wait.
		if d2, ok2 := ParseRetryAfter(v, now.Add(time.Hour)); ok2 != ok || d2 > d {
			t.Fatalf("ParseRetryAfter(%q): now+1h gave (%v, %v) after (%v, %v)", v, d2, ok2, d, ok)
		}
	})
}

func FuzzDecodeKeyStatus(f *testing.F) {
	f.Add(200, []byte(`{"status":"completed","response_status":201,"response_body":{"id":"p1"}}`), "")
	f.Add(200, []byte(`{"status":"completed","response_status":204,"response_body":null}`), "")
	f.Add(200, []byte(`{"status":"completed","response_status":600}`), "")
	f.Add(202, []byte(`{"status":"processing"}`), "2")
	f.Add(202, []byte(`{"status":"processing"}`), "Sun, 06 Nov 1994 08:49:37 GMT")
	f.Add(404, []byte(`{"status":"not_found"}`), "")
	f.Add(500, []byte(`oops`), "99999999999999999999")
	f.Add(200, []byte(``), "")
	f.Add(200, []byte(`null`), "-1")
	f.Add(-1, []byte(`{"status":"completed","response_status":-1}`), "")
	now := time.Date(2024, time.March, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, code int, body []byte, retryAfter string) {
		var h http.Header
		if retryAfter != "" {
			h = http.Header{"Retry-After": {retryAfter}}
		}
		st := DecodeKeyStatus(code, h, body, now)
		switch st.State {
		case KeyStatusCompleted:
			if code != http.StatusOK {
				t.Fatalf("completed from HTTP %d", code)
			}
			if st.ResponseStatusCode < 100 || st.ResponseStatusCode > 599 {
				t.Fatalf("completed with response_status %d", st.ResponseStatusCode)
			}
			if string(st.ResponseBody) == "null" {
				t.Fatalf("completed with a literal null body")
			}
		case KeyStatusProcessing:
			if code != http.StatusAccepted {
				t.Fatalf("processing from HTTP %d", code)
			}
		case KeyStatusNotFound:
			if code != http.StatusNotFound {
				t.Fatalf("not_found from HTTP %d", code)
			}
		case KeyStatusUnknown:
		default:
			t.Fatalf("state %d out of range", st.State)
		}
		if st.State != KeyStatusCompleted && (st.ResponseStatusCode != 0 || st.ResponseBody != nil) {
			t.Fatalf("state %s carries a response (%d, %q)", st.State, st.ResponseStatusCode, st.ResponseBody)
		}
		wantRA, wantOK := ParseRetryAfter(retryAfter, now)
		if st.RetryAfter != wantRA || st.HasRetryAfter != wantOK {
			t.Fatalf("Retry-After %q: got (%v, %v), want (%v, %v)", retryAfter, st.RetryAfter, st.HasRetryAfter, wantRA, wantOK)
		}
	})
}

// FuzzIsKeyReuse: the key-reuse rule never panics, and a body names key reuse only through
// one of its error members: KeyConflictCodes with that exact member agrees, on 400 and 422;
// the 400 rule implies the 422 rule, and ClassifyStatusCode follows both.
func FuzzIsKeyReuse(f *testing.F) {
	for _, s := range []string{
		`{"error":"idempotency_key_reused"}`, `{"error":{"type":"idempotency_error"}}`,
		`{"type":"https://x/idempotency-key-reuse"}`, `{"error":"invalid_request"}`, `{"error":1}`,
		`{"error":null}`, `[]`, `"idempotency"`, ``, `{`, `{"code":"IDEMPOTENCY"}`,
		`{"errors":[{"code":"idempotency_key_reused"}]}`, `{"errors":[1,"idempotency",{"title":"x"}]}`,
		`{"type":"https://x/idempotency-key-missing"}`, `{"code":"IDEMPOTENCY_KEY_PAYLOAD_MISMATCH"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := IsKeyReuse(body)
		codes := errorCodes(body)
		named := false
		for _, c := range codes {
			if strings.Contains(strings.ToLower(c), "idempotency") {
				named = true
				for _, status := range []int{http.StatusUnprocessableEntity, http.StatusBadRequest} {
					a := &Attempt{Response: &http.Response{StatusCode: status}, Body: body}
					if KeyConflictCodes(c).Classify(a) != ClassKeyConflict {
						t.Fatalf("KeyConflictCodes(%q) disagrees on %q", c, body)
					}
				}
			}
		}
		if got != named {
			t.Fatalf("IsKeyReuse(%q) = %v, codes %q", body, got, codes)
		}
		// The 400 rule is stricter than the 422 rule, and both are what ClassifyStatusCode says.
		at := func(status int) *Attempt {
			return &Attempt{Response: &http.Response{StatusCode: status}, Body: body}
		}
		if isKeyReuse400(body) && !got {
			t.Fatalf("isKeyReuse400(%q) without IsKeyReuse", body)
		}
		if (ClassifyStatusCode(at(http.StatusBadRequest)) == ClassKeyConflict) != isKeyReuse400(body) ||
			(ClassifyStatusCode(at(http.StatusUnprocessableEntity)) == ClassKeyConflict) != got {
			t.Fatalf("ClassifyStatusCode disagrees with the key-reuse rule on %q", body)
		}
	})
}
