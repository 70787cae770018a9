package probe

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/google/uuid"
)

// inProgress sends bursts of Concurrency identical requests with one fresh key each, at
// most Rounds of them, until one shows what the API does with a key in progress. Each burst
// goes out on connections opened beforehand, so that the requests reach the server together.
// It returns the references used (one operation each).
func (p *prober) inProgress(ctx context.Context) []string {
	client, done := p.burstClient()
	defer done()
	var refs []string
	for round := 1; ; round++ {
		key, ref := uuid.NewString(), "probe-"+uuid.NewString()
		refs = append(refs, ref)
		p.warm(ctx, client)
		res, evidence := p.burst(ctx, client, key, ref)
		if res != NotObserved || round >= p.s.cfg.Rounds {
			if round > 1 {
				evidence += fmt.Sprintf(" (burst %d of %d)", round, p.s.cfg.Rounds)
			}
			p.set(CheckInProgress, res, "%s", evidence)
			return refs
		}
	}
}

// burstClient is cfg.HTTPClient with room for Concurrency idle connections per host.
func (p *prober) burstClient() (*http.Client, func()) {
	base := p.s.cfg.HTTPClient
	var t *http.Transport
	switch rt := base.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		t = rt.Clone()
	default:
		return base, func() {}
	}
	t.MaxIdleConnsPerHost = p.s.cfg.Concurrency
	c := *base
	c.Transport = t
	return &c, t.CloseIdleConnections
}

// warm opens Concurrency connections with harmless GETs (a status query for an unknown key,
// or the endpoint's path), so that the burst does not wait for dials.
func (p *prober) warm(ctx context.Context, client *http.Client) {
	path := p.s.cfg.Path
	if p.s.cfg.StatusPath != "-" {
		path = p.s.statusPath(uuid.NewString())
	}
	var wg sync.WaitGroup
	for range p.s.cfg.Concurrency {
		wg.Go(func() { p.s.doWith(ctx, client, http.MethodGet, path, "", nil) })
	}
	wg.Wait()
}

// burst sends Concurrency identical requests at once and judges their answers.
func (p *prober) burst(ctx context.Context, client *http.Client, key, ref string) (Result, string) {
	n := p.s.cfg.Concurrency
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = p.s.postWith(ctx, client, key, p.s.cfg.Body(ref))
		})
	}
	close(start)
	wg.Wait()

	tally := map[string]int{}
	var bodies [][]byte
	conflicts, withRA, other := 0, 0, 0
	for _, a := range answers {
		p.addID(ref, a)
		switch {
		case a.err != nil:
			tally["error"]++
			other++
		case a.ok():
			tally[fmt.Sprint(a.status)]++
			if !containsBytes(bodies, a.body) {
				bodies = append(bodies, a.body)
			}
		case a.status == http.StatusConflict:
			tally["409"]++
			conflicts++
			if a.header.Get("Retry-After") != "" {
				withRA++
			}
		default:
			tally[fmt.Sprint(a.status)]++
			other++
		}
	}
	counts := formatTally(tally)
	switch {
	case len(bodies) > 1:
		return Broken, fmt.Sprintf("%d requests, one key: %s with %d different bodies: executed concurrently", n, counts, len(bodies))
	case other > 0:
		return Broken, fmt.Sprintf("%d requests, one key: %s; want only 2xx and 409", n, counts)
	case conflicts > 0 && withRA == conflicts:
		return Honoured, fmt.Sprintf("%d requests, one key: %s, every 409 with Retry-After", n, counts)
	case conflicts > 0:
		return Honoured, fmt.Sprintf("%d requests, one key: %s; %d 409s without Retry-After", n, counts, conflicts-withRA)
	}
	return NotObserved, fmt.Sprintf("%d requests, one key: %s, identical: no overlap seen (best effort; executes-once confirms)", n, counts)
}
