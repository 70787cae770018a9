package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/outcome"
)

// maxAnswerBytes bounds a body the probe reads.
const maxAnswerBytes = 1 << 20

// maxThrottleWait bounds how long the probe honours a Retry-After before it gives up on a
// request (the answer is then reported as it came).
const maxThrottleWait = 5 * time.Second

// answer is what one request got.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func (a answer) ok() bool { return a.err == nil && a.status >= 200 && a.status < 300 }

// String is the answer in a few words, for evidence.
func (a answer) String() string {
	if a.err != nil {
		return "transport error: " + a.err.Error()
	}
	return fmt.Sprintf("HTTP %d %s", a.status, short(a.body))
}

// short is a body cut to 60 bytes for evidence.
func short(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// retryAfterSeen is one Retry-After value an answer carried.
type retryAfterSeen struct {
	status int
	value  string
}

// sender sends the probe's requests and remembers every Retry-After.
type sender struct {
	cfg Config

	mu          sync.Mutex
	retryAfters []retryAfterSeen
	unthrottled []int // 429 or 503 answers without Retry-After
	sent        int   // requests sent, answered or not
	answered    bool  // some request got an HTTP answer: the API can be reached
	lastErr     error // the last transport error, for ErrUnreachable
}

func (s *sender) do(ctx context.Context, method, path, key string, body []byte) answer {
	return s.doWith(ctx, s.cfg.HTTPClient, method, path, key, body)
}

func (s *sender) doWith(ctx context.Context, client *http.Client, method, path, key string, body []byte) answer {
	req, err := http.NewRequestWithContext(ctx, method, s.cfg.BaseURL+path, nil)
	if err != nil {
		return answer{err: err}
	}
	s.prepare(req, key, body)
	resp, err := client.Do(req)
	s.mu.Lock()
	s.sent++
	if err != nil {
		s.lastErr = err
	} else {
		s.answered = true
	}
	s.mu.Unlock()
	if err != nil {
		return answer{err: err}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Its body is the raw connection, which no context or timeout ends: never read it.
		resp.Body.Close()
		return answer{err: errors.New("probe: the server answered 101 Switching Protocols to a request that asked for no upgrade")}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	a := answer{status: resp.StatusCode, header: resp.Header, body: b, err: err}
	s.note(a)
	return a
}

// prepare sets req's body (nil: none), the configured headers and the key ("" for none).
// The transport gets no GetBody, so it never resends on its own: the probe counts what it
// sends.
func (s *sender) prepare(req *http.Request, key string, body []byte) {
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	req.GetBody = nil
	for k, vs := range s.cfg.Header {
		req.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	if key != "" {
		req.Header.Set(s.cfg.KeyHeader, key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
}

// note records a's Retry-After, or its absence on a 429 or 503.
func (s *sender) note(a answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := a.header["Retry-After"]; ok {
		s.retryAfters = append(s.retryAfters, retryAfterSeen{a.status, strings.Join(v, ", ")})
	} else if a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable {
		s.unthrottled = append(s.unthrottled, a.status)
	}
}

// post sends body with key; a 429 or 503 is resent with the same key after its Retry-After
// (at most maxThrottleWait, three times), since it says nothing was executed.
func (s *sender) post(ctx context.Context, key string, body []byte) answer {
	return s.postWith(ctx, s.cfg.HTTPClient, key, body)
}

func (s *sender) postWith(ctx context.Context, client *http.Client, key string, body []byte) answer {
	for i := 1; ; i++ {
		a := s.doWith(ctx, client, http.MethodPost, s.cfg.Path, key, body)
		if a.err != nil || (a.status != http.StatusTooManyRequests && a.status != http.StatusServiceUnavailable) ||
			i >= 4 || !s.pause(ctx, a) { // no pause after the last try
			return a
		}
	}
}

// get asks a status or search path, waiting out 202 processing and transient answers
// (resets, 429, 5xx; see transient), at most transientTries times.
func (s *sender) get(ctx context.Context, path string) answer {
	for i := 1; ; i++ {
		a := s.do(ctx, http.MethodGet, path, "", nil)
		if !transient(a) && a.status != http.StatusAccepted || i >= transientTries || !s.pause(ctx, a) { // no pause after the last try
			return a
		}
	}
}

// pause waits a's Retry-After (or 200 ms without one); false if it is too long or ctx ended.
func (s *sender) pause(ctx context.Context, a answer) bool {
	d, ok := outcome.ParseRetryAfter(a.header.Get("Retry-After"), s.cfg.Now())
	if !ok {
		d = 200 * time.Millisecond
	}
	if d > maxThrottleWait {
		return false
	}
	return s.cfg.Sleep(ctx, d) == nil
}

// statusPath is the status endpoint's path for key.
func (s *sender) statusPath(key string) string {
	return strings.ReplaceAll(s.cfg.KeyStatusPath, "{key}", url.PathEscape(key))
}

// searchPath is the search's path for ref.
func (s *sender) searchPath(ref string) string {
	return strings.ReplaceAll(s.cfg.SearchPath, "{reference}", url.QueryEscape(ref))
}
