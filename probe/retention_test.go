package probe_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/probe"
)

// clock is a fake clock that the probe's Sleep moves forward.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

// The retention edge: an API advertising one hour is resent a key 54 minutes after its
// answer. Kept for the hour, the key is replayed (honoured); forgotten after 30 minutes, the
// resend is a second charge (broken, unsafe), and executes-once sees it too. An advertised
// retention longer than the probe may wait, or none, is not observed.
func TestRetentionEdge(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kept      time.Duration // the server's real retention
		advertise time.Duration
		want      probe.Result
	}{
		{"kept as advertised", time.Hour, time.Hour, probe.Honoured},
		{"forgotten early", 30 * time.Minute, time.Hour, probe.Broken},
		{"too long to wait", time.Hour, 24 * time.Hour, probe.NotObserved},
		{"not advertised", time.Hour, 0, probe.NotObserved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
			api := idemtest.NewServer(idemtest.Config{KeyRetention: tc.kept, Now: clk.Now})
			t.Cleanup(api.Close)
			rep := run(t, api.URL, func(c *probe.Config) {
				c.Retention, c.RetentionWait, c.Now, c.Sleep, c.Trials = tc.advertise, 2*time.Hour, clk.Now, clk.Sleep, 3
			})
			r, _ := rep.Row(probe.CheckRetention)
			if r.Result != tc.want {
				t.Fatalf("retention = %s (%s), want %s", r.Result, r.Evidence, tc.want)
			}
			switch tc.want {
			case probe.Broken:
				once, _ := rep.Row(probe.CheckExecutesOnce)
				if rep.Verdict != probe.VerdictUnsafe || once.Result != probe.Broken || !strings.Contains(r.Evidence, "54m0s") {
					t.Errorf("verdict %s, executes-once %s, evidence %q", rep.Verdict, once.Result, r.Evidence)
				}
			case probe.Honoured:
				if r.Trials != 1 || !strings.Contains(r.Evidence, "HTTP 201") {
					t.Errorf("row %+v", r)
				}
			}
			if tc.advertise > 0 && !strings.Contains(strings.Join(rep.Suggestion.Notes, " "), "advertised retention, "+tc.advertise.String()) {
				t.Errorf("notes %q do not cap KeyTTL at the advertised retention", rep.Suggestion.Notes)
			}
		})
	}
}

// The lost response is lost on the probe's side only: the server gets the whole request
// and answers it (here it counts the answers it finished writing), the probe never reads
// the answer, and the resend under the same key is replayed, not executed again.
func TestLostResponseCutsAfterTheRequest(t *testing.T) {
	api := idemtest.NewServer(idemtest.Config{})
	t.Cleanup(api.Close)
	var mu sync.Mutex
	unread, posts := 0, 0 // POSTs whose answer the probe did not read to its end
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if r.Method != http.MethodPost {
			return resp, err
		}
		mu.Lock()
		defer mu.Unlock()
		posts++
		if err != nil {
			unread++
			return resp, err
		}
		resp.Body = &eofBody{ReadCloser: resp.Body, onClose: func(eof bool) {
			if !eof {
				mu.Lock()
				unread++
				mu.Unlock()
			}
		}}
		return resp, nil
	})}
	rep := run(t, api.URL, func(c *probe.Config) { c.HTTPClient, c.Trials = client, 6 })
	r, _ := rep.Row(probe.CheckLostResponse)
	if r.Result != probe.Honoured || r.Trials != 2 {
		t.Fatalf("lost-response = %+v", r)
	}
	// The two cut requests were executed by the server, each once.
	n := 0
	for _, ref := range refsOf(api) {
		if api.ExecutionsByReference(ref) != 1 {
			t.Errorf("reference %s executed %d times", ref, api.ExecutionsByReference(ref))
		}
		n++
	}
	if n != rep.Charges.Found {
		t.Errorf("ledger %d, charges %+v", n, rep.Charges)
	}
	mu.Lock()
	defer mu.Unlock()
	if unread != 2 {
		t.Errorf("%d of %d POSTs had their answer unread, want the 2 cut", unread, posts)
	}
}

// eofBody reports on Close whether the body was read to its end.
type eofBody struct {
	io.ReadCloser
	eof     bool
	onClose func(eof bool)
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *eofBody) Close() error {
	b.onClose(b.eof)
	return b.ReadCloser.Close()
}

// refsOf is the references of every execution of api, once each.
func refsOf(api *idemtest.Server) []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range api.Executions() {
		if !seen[e.Reference] {
			seen[e.Reference] = true
			out = append(out, e.Reference)
		}
	}
	return out
}

// The default trials catch a server re-executing after 10% of its executions with at least
// 95% probability, and the report says so; fewer trials say how many would.
func TestPowerOfTheTrials(t *testing.T) {
	p := probe.Power{Trials: probe.DefaultTrials, Rate: probe.DesignRate, Probability: 1 - pow(0.9, probe.DefaultTrials)}
	if p.Probability < probe.DesignPower || 1-pow(0.9, probe.DefaultTrials-2) >= probe.DesignPower {
		t.Errorf("DefaultTrials %d: power %.4f; 28 trials would give %.4f", probe.DefaultTrials, p.Probability, 1-pow(0.9, probe.DefaultTrials-2))
	}
	if s := p.String(); !strings.Contains(s, "30 trials") || !strings.Contains(s, "95.8%") {
		t.Errorf("%q", s)
	}
	low := probe.Power{Trials: 10, Rate: probe.DesignRate, Probability: 1 - pow(0.9, 10)}
	if s := low.String(); !strings.Contains(s, "65.1%") || !strings.Contains(s, "below 95%: 29 trials reach it") {
		t.Errorf("%q", s)
	}
	// Run reports the power of the trials the search counted.
	f := &fake{}
	rep := run(t, f.start(t).URL, func(c *probe.Config) { c.Trials = 10 })
	if rep.Power.Trials != 10 || rep.Power.Probability < 0.65 || rep.Power.Probability > 0.66 {
		t.Errorf("power %+v", rep.Power)
	}
}

func pow(x float64, n int) float64 {
	r := 1.0
	for range n {
		r *= x
	}
	return r
}
