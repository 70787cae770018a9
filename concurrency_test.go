package idem

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

// A server that commits every second request on a connection and then resets it. net/http
// would silently resend such a request on a fresh connection (it counts as replayable with
// an Idempotency-Key and GetBody); idem must own every resend, so the attempts the server
// sees equal the attempts idem records.
func TestNoHiddenTransportReplays(t *testing.T) {
	type connKey struct{}
	var served atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		n := r.Context().Value(connKey{}).(*atomic.Int64).Add(1)
		if n%2 == 0 { // committed, then the connection dies before the answer
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int64))
	}
	srv.Start()
	defer srv.Close()

	c, err := NewClient(Config{BaseURL: srv.URL, Budget: BudgetConfig{Disabled: true}, Sleep: func(context.Context, time.Duration) error { return nil }})
	require.NoError(t, err)
	recorded := 0
	for i := range 10 {
		res, err := c.Do(context.Background(), payment(i+1, "replay"), CallMaxAttempts(5))
		if err == nil {
			recorded += res.Attempts
		} else {
			recorded += opErr(t, err).Attempts
		}
	}
	assert.Equal(t, int(served.Load()), recorded, "server-seen attempts == attempts idem recorded")
	assert.Equal(t, int64(recorded), c.Stats().Attempts)
	assert.Greater(t, recorded, 10, "the resets forced resends, all of them idem's")
}

// Two goroutines with the same key: one send, both get the same answer.
func TestSameKeyNeverSentConcurrently(t *testing.T) {
	e := newEnv(t, idemtest.Config{SlowDelay: 80 * time.Millisecond}, nil)
	e.srv.Script(idemtest.FaultSlow)
	op := payment(4200, "dup")
	var wg sync.WaitGroup
	results := make([]*Result, 8)
	errs := make([]error, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.c.Do(context.Background(), op, CallAttemptTimeout(5*time.Second))
		}()
	}
	wg.Wait()
	for i := range results {
		require.NoError(t, errs[i])
		assert.Equal(t, results[0].Body, results[i].Body)
	}
	assert.Equal(t, 1, e.srv.AttemptsFor(op.Key()))
	assert.Equal(t, 1, e.srv.ExecutionsFor(op.Key()))
	assert.Equal(t, int64(7), e.c.Stats().SameKeyConcurrency)
	sources := map[outcome.Source]int{}
	for _, r := range results {
		sources[r.Source]++
	}
	assert.Equal(t, map[outcome.Source]int{outcome.SourceResponse: 1, outcome.SourceStore: 7}, sources)
}

// Per-call options apply to that call only, even with many concurrent calls.
func TestPerCallPolicyDoesNotLeak(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	c, _, _ := scriptedClient(t, h, nil)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := 1 + i%4
			_, err := c.Do(context.Background(), payment(i+1, "leak"), CallMaxAttempts(want))
			assert.ErrorIs(t, err, ErrExhausted)
			if oe := opErr(t, err); oe != nil {
				assert.Equal(t, want, oe.Attempts, "call %d", i)
			}
		}()
	}
	wg.Wait()
	// The client default is untouched.
	_, err := c.Do(context.Background(), payment(99, "default"))
	assert.Equal(t, defaultMaxAttempts, opErr(t, err).Attempts)
}

// slowCreate widens the window between persisting a record and sending it.
type slowCreate struct {
	keystore.Store
	delay time.Duration
}

func (s slowCreate) Create(ctx context.Context, rec *keystore.Record) error {
	err := s.Store.Create(ctx, rec)
	time.Sleep(s.delay)
	return err
}

// Recover running beside new calls must never send a key that a Do has just persisted:
// the key lock is taken before the record exists.
func TestRecoverBesideNewCallsNeverDoubleSends(t *testing.T) {
	e := newEnv(t, idemtest.Config{}, nil)
	c, err := NewClient(Config{BaseURL: e.srv.URL, Store: slowCreate{e.store, 20 * time.Millisecond},
		KeyStatusURL: statusPath, Budget: BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	stop := make(chan struct{})
	recovered := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				recovered <- n
				return
			default:
			}
			rep, _ := c.Recover(context.Background(), nil)
			n += rep.Succeeded
		}
	}()
	var wg sync.WaitGroup
	ops := make([]*Operation, 20)
	for i := range ops {
		ops[i] = payment(i+1, "beside")
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Do(context.Background(), ops[i])
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	close(stop)
	assert.Equal(t, 0, <-recovered, "Recover never took a key a Do was about to send")
	assert.Equal(t, len(ops), e.srv.Stats().Requests, "one POST per call")
	for _, op := range ops {
		assert.Equal(t, keystore.StateSucceeded, e.record(op.Key()).State)
	}
}
