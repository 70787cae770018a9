package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// childEnv carries the child's configuration (JSON) from the parent. Its presence is what
// makes a process a child: main, or TestMain in the test binary, checks it first.
const childEnv = "IDEM_PAYMENTS_CHILD"

// statsEvery is how often a child sends its counters between calls (every call sends them
// too), so that a SIGKILLed child loses only what its last moments counted.
const statsEvery = 200 * time.Millisecond

// maxRounds bounds how often one key is driven again while its outcome stays pending.
const maxRounds = 40

// maxUnanswered bounds the rounds in a row that got no answer at all for a key: every
// attempt failed before the request was written (connection refused, DNS), so the API is
// unreachable and nothing was executed. The payment is left pending, known not executed
// (keystore.Record.NotExecuted), for a later run to resend with the same key; 40 rounds of
// waiting would only make an unreachable API take minutes to report.
const maxUnanswered = 3

// maxRefused bounds the rounds in a row whose resend, after an outcome the key could not
// settle, was refused with a 4xx that is not the key's stored answer (idem keeps such a
// record pending: the refusal says nothing of the earlier attempt). The same bytes get the
// same refusal: the payment is left pending for reconciliation instead of being driven
// 40 rounds.
const maxRefused = 3

// childConfig is what the parent tells a child.
type childConfig struct {
	Gen         int       `json:"gen"`
	BaseURL     string    `json:"base_url"`
	API         apiSpec   `json:"api"` // dialect and settling routes
	Store       storeSpec `json:"store"`
	N           int       `json:"n"`
	Seed        int64     `json:"seed"`
	RunID       string    `json:"run_id"`
	Concurrency int       `json:"concurrency"`
	// Instance is the sender's place in the fleet (0..Instances-1): it offers every payment,
	// starting at its own share, so that instances mostly work apart and meet at the end.
	Instance  int `json:"instance"`
	Instances int `json:"instances"`
}

// childMain is a sender process: reopen the keystore, reconcile what a killed predecessor
// left pending, then pay every payment not finished yet. It may be SIGKILLed at any moment.
func childMain(raw string, stdout, stderr io.Writer) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(stderr, "child: bad %s: %v\n", childEnv, err)
		return 2
	}
	var (
		store      keystore.Store
		closeStore func()
	)
	err := startupRetry(cfg.Store, func() (err error) {
		store, closeStore, err = cfg.Store.open(context.Background())
		return err
	})
	if err != nil {
		fmt.Fprintf(stderr, "child %d: %v\n", cfg.Gen, err)
		return 1
	}
	defer closeStore()
	client, err := newClient(cfg.BaseURL, cfg.API, store, cfg.Concurrency, cfg.Store.fleet())
	if err != nil {
		fmt.Fprintf(stderr, "child %d: %v\n", cfg.Gen, err)
		return 1
	}
	defer client.Close() // stops the background reclaimer (fleet)
	em := &emitter{w: stdout, stats: client.Stats}
	stopStats := flushStats(client, em)
	defer stopStats()

	ctx := context.Background()
	// Recover first: records a killed process left pending are reconciled (status endpoint,
	// then a resend with the same key only if the server never saw it) before new sends.
	// An application would pass a handler that marks its orders paid or failed; here the
	// senders below learn each payment's outcome from Do (answered from the keystore).
	var rep idem.RecoverReport
	err = startupRetry(cfg.Store, func() (err error) {
		rep, err = client.Recover(ctx, nil)
		return err
	})
	if err != nil {
		fmt.Fprintf(stderr, "child %d: recover: %v\n", cfg.Gen, err)
		return 1
	}
	// Of the pending records it found, those now final or manual (not the manual records a
	// lookup settled, which were never pending: rep.Resolved).
	em.emit(event{T: "recover", Report: &rep, Recovered: rep.Succeeded + rep.Failed + rep.Manual})
	em.emit(event{T: "sending"})

	s := &sender{client: client, em: em}
	work := make(chan payment)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for p := range work {
				s.pay(ctx, p)
			}
		})
	}
	// Every payment is offered again: one finished by an earlier process is answered from
	// the keystore (Do finds its intent) without sending anything.
	ps := generate(cfg.N, cfg.Seed)
	tagRun(ps, cfg.RunID)
	first := 0
	if cfg.Instances > 1 {
		first = cfg.Instance * len(ps) / cfg.Instances
	}
	for k := range ps {
		work <- ps[(first+k)%len(ps)]
	}
	close(work)
	wg.Wait()
	return 0
}

// flushStats sends the client's counters every statsEvery and once more when stopped.
func flushStats(client *idem.Client, em *emitter) (stop func()) {
	send := func() {
		em.emit(event{T: "stats"})
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(statsEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				send()
			case <-done:
				send()
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// sender pays payments with one shared idem client.
type sender struct {
	client   *idem.Client
	em       *emitter
	inflight atomic.Int64
}

// pay drives one payment to a final state and reports it.
func (s *sender) pay(ctx context.Context, p payment) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for try := 1; ; try++ {
		res, err := s.settle(ctx, p, intentName(p.Index, try))
		done := event{T: "done", I: p.Index, Tries: try}
		var oe *idem.OperationError
		switch {
		case err == nil:
			done.OK, done.Status, done.ID = true, res.StatusCode, paymentID(res.Body)
		case errors.Is(err, idem.ErrNotExecuted) && try < maxTries:
			// The key's outcome was settled as not executed (the server stored a 5xx for it
			// and the search by reference found no charge, or the profile's cancel by
			// reference canceled whatever it charged): only now is paying again safe, as a
			// new intent (a new key).
			continue
		case errors.As(err, &oe):
			done.Status, done.Pending = oe.LastStatusCode, !final(err)
		default:
			done.Pending = true
		}
		done.Inflight = int(s.inflight.Load()) - 1
		s.em.emit(done)
		return
	}
}

// settle drives one intent's key to a final state: Do, and Do again while the outcome
// stays pending (unknown, exhausted, throttled too long, budget empty). Every Do of the same
// intent reuses the key persisted the first time, in this process or a killed one.
func (s *sender) settle(ctx context.Context, p payment, intent string) (*idem.Result, error) {
	unanswered, refused := 0, 0
	for round := 1; ; round++ {
		op := idem.NewOperation(http.MethodPost, paymentsPath, p.body(), idem.WithIntent(intent))
		start := time.Now()
		res, err := s.client.Do(ctx, op)
		if !fromStore(res, err) {
			s.em.emit(event{T: "call", I: p.Index, MS: float64(time.Since(start).Microseconds()) / 1000})
		}
		if err == nil || final(err) || round == maxRounds {
			return res, err
		}
		if unansweredErr(err) {
			unanswered++
		} else {
			unanswered = 0
		}
		if refusedErr(err) {
			refused++
		} else {
			refused = 0
		}
		if unanswered == maxUnanswered || refused == maxRefused {
			return res, err
		}
		// Give the server a moment (a slow request may still hold the key) before asking again.
		time.Sleep(min(time.Duration(round)*20*time.Millisecond, 500*time.Millisecond))
	}
}

// final reports whether err is a final answer for the key; anything else leaves the record
// pending, and the same key must be driven again. A stored 5xx (ErrStoredServerError) is
// final for the key but not for the payment: it waits for reconciliation, never resent.
func final(err error) bool {
	return errors.Is(err, idem.ErrPermanent) || errors.Is(err, idem.ErrKeyConflict) ||
		errors.Is(err, idem.ErrKeyExpired) || errors.Is(err, idem.ErrInvalidOperation) ||
		errors.Is(err, idem.ErrStoredServerError) || errors.Is(err, idem.ErrNotExecuted)
}

// unansweredErr reports a give-up in which the API never answered the key: not an unknown
// outcome, and no HTTP status in this call or any earlier one.
func unansweredErr(err error) bool {
	var oe *idem.OperationError
	return errors.As(err, &oe) && !oe.Unknown && oe.LastStatusCode == 0
}

// refusedErr reports an unknown outcome whose last answer was a refusal (a 4xx other than
// the statuses that say "come back": 408, 409, 425, 429).
func refusedErr(err error) bool {
	var oe *idem.OperationError
	if !errors.As(err, &oe) || !errors.Is(err, idem.ErrOutcomeUnknown) || oe.LastStatusCode/100 != 4 {
		return false
	}
	switch oe.LastStatusCode {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return true
}

// fromStore reports whether Do answered from the keystore without any network work.
func fromStore(res *idem.Result, err error) bool {
	if err == nil {
		return res.Source == outcome.SourceStore
	}
	var oe *idem.OperationError
	return errors.As(err, &oe) && oe.Stored
}

// paymentID extracts "id" from a payment body, "" if there is none.
func paymentID(body []byte) string {
	var v struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &v)
	return v.ID
}

// startupRetry runs f, and with a PostgreSQL keystore runs it again for up to 30 s while it
// fails: a sender restarted during a database blip (a restart, its sessions terminated)
// aborted the whole run, which then dropped its schema and the pending records with it
// (adversarial run). Opening the store and Recover are safe to repeat. A bbolt file's
// errors (damaged, locked by a live process) do not pass with time: f runs once.
func startupRetry(spec storeSpec, f func() error) error {
	if !spec.fleet() {
		return f()
	}
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(30*time.Second))
	return backoff.Retry(f, b)
}
