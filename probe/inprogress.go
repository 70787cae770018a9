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
// Each burst is one payment (p.payment).
func (p *prober) inProgress(ctx context.Context) {
	client, done := p.burstClient()
	defer done()
	for round := 1; ; round++ {
		key, ref := uuid.NewString(), "probe-"+uuid.NewString()
		p.payment(CheckInProgress, key, ref)
		p.warm(ctx, client)
		res, evidence := p.burst(ctx, client, key, ref)
		if res != NotObserved || round >= p.s.cfg.Rounds {
			if round > 1 {
				evidence += fmt.Sprintf(" (burst %d of %d)", round, p.s.cfg.Rounds)
			}
			p.setN(CheckInProgress, round*p.s.cfg.Concurrency, res, "%s", evidence)
			return
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
	if p.s.cfg.KeyStatusPath != "-" {
		path = p.s.statusPath(uuid.NewString())
	}
	var wg sync.WaitGroup
	for range p.s.cfg.Concurrency {
		wg.Go(func() { p.s.doWith(ctx, client, http.MethodGet, path, "", nil) })
	}
	wg.Wait()
}

// burst sends Concurrency identical requests at once and judges their answers. Transient
// answers (see transient) and replays of a stored 5xx say nothing about overlap; only
// different 2xx bodies or another kind of answer are Broken.
func (p *prober) burst(ctx context.Context, client *http.Client, key, ref string) (res Result, evidence string) {
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
		p.answered(key, ref, a)
		switch {
		case a.ok():
			tally[fmt.Sprint(a.status)]++
			if !containsBytes(bodies, a.body) {
				bodies = append(bodies, a.body)
			}
		case a.err == nil && a.status == http.StatusConflict:
			tally["409"]++
			conflicts++
			p.conflict = a
			if a.header.Get("Retry-After") != "" {
				withRA++
			}
		case transient(a), storedServerError(a):
			tally[answerKind(a)]++
		default:
			tally[answerKind(a)]++
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
	return NotObserved, fmt.Sprintf("%d requests, one key: %s: no overlap seen (best effort; executes-once confirms)", n, counts)
}
