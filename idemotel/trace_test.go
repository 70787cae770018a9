package idemotel_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// hangFirst serves the idemtest API, except that the first n POSTs hang until the client
// hangs up (its attempt timeout), unread and never executed: the status endpoint then says
// not_found and idem may resend the key.
func hangFirst(t *testing.T, n int64, cfg idemtest.Config) (*httptest.Server, *idemtest.Handler) {
	t.Helper()
	api := idemtest.NewHandler(cfg)
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && posts.Add(1) <= n {
			_, _ = io.Copy(io.Discard, r.Body) // the server notices a hang-up only once the body is read
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); api.Close() })
	return srv, api
}

type sleeps struct {
	mu  sync.Mutex
	got []time.Duration
}

// sleep records the wait instead of sleeping: the Retry-After is checked, not waited out.
func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.got = append(s.got, d)
	s.mu.Unlock()
	return ctx.Err()
}

func tracedClient(t *testing.T, baseURL string, tr *idemotel.Tracer, mod func(*idem.Config)) *idem.Client {
	t.Helper()
	cfg := idem.Config{BaseURL: baseURL, Store: keystore.NewMemory(), KeyStatusURL: idemtest.KeyStatusPathPattern,
		Policy: idem.Policy{AttemptTimeout: 200 * time.Millisecond}, Hooks: tr.Hooks(event.Hooks{})}
	if mod != nil {
		mod(&cfg)
	}
	c, err := idem.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newTracer(t *testing.T) (*idemotel.Tracer, *tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := idemotel.NewTracer(tp)
	if err != nil {
		t.Fatal(err)
	}
	return tr, exp, tp
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func payment(ref string) *idem.Operation {
	b, _ := json.Marshal(map[string]any{"amount": 1250, "currency": "EUR", "customer": "cus_1", "reference": ref})
	return idem.NewOperation(http.MethodPost, idemtest.PaymentsPath, b, idem.WithIntent("order-"+ref))
}

// A call whose first attempt times out, whose status check says not_found, and whose resend
// succeeds: one idem.call span (child of the caller's span) with two attempt spans, the
// second carrying http.request.resend_count 1 and the first none; the timeout, the status
// check and the wait are events on the call span, in that order; key and outcome are
// attributes.
func TestTraceTimeoutStatusCheckResend(t *testing.T) {
	srv, api := hangFirst(t, 1, idemtest.Config{})
	tr, exp, tp := newTracer(t)
	c := tracedClient(t, srv.URL, tr, nil)

	ctx, parent := tp.Tracer("job").Start(context.Background(), "payment job")
	op := payment("trace-1")
	res, err := tr.Do(ctx, c, op)
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || res.KeyStatusChecks != 1 || api.ExecutionsByReference("trace-1") != 1 {
		t.Fatalf("attempts %d, status checks %d, charges %d; want 2, 1, 1", res.Attempts, res.KeyStatusChecks, api.ExecutionsByReference("trace-1"))
	}

	spans := exp.GetSpans()
	var callSpan tracetest.SpanStub
	var attempts []tracetest.SpanStub
	for _, s := range spans {
		switch s.Name {
		case idemotel.CallSpanName:
			callSpan = s
		case http.MethodPost:
			attempts = append(attempts, s)
		}
	}
	if len(spans) != 4 || len(attempts) != 2 {
		t.Fatalf("%d spans (%d attempts), want the job's, the call's and 2 attempts", len(spans), len(attempts))
	}
	if callSpan.Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Error("the call span is not a child of the caller's span")
	}
	ca := attrs(callSpan.Attributes)
	if ca[idemotel.AttrKey].AsString() != op.Key() || ca[idemotel.AttrOutcome].AsString() != idemotel.OutcomeSucceeded ||
		ca[idemotel.AttrAttempts].AsInt64() != 2 || ca[idemotel.AttrStatusChecks].AsInt64() != 1 ||
		ca[idemotel.AttrIntent].AsString() != "order-trace-1" {
		t.Errorf("call span attributes: %v", callSpan.Attributes)
	}
	for i, a := range attempts {
		if a.Parent.SpanID() != callSpan.SpanContext.SpanID() || a.SpanKind != trace.SpanKindClient {
			t.Errorf("attempt %d: parent %v kind %v, want the call span, client", i+1, a.Parent.SpanID(), a.SpanKind)
		}
		m := attrs(a.Attributes)
		if m[idemotel.AttrKey].AsString() != op.Key() || m[idemotel.AttrMethod].AsString() != http.MethodPost {
			t.Errorf("attempt %d: key %q method %q", i+1, m[idemotel.AttrKey].AsString(), m[idemotel.AttrMethod].AsString())
		}
		if a.EndTime.Before(a.StartTime) || a.StartTime.Before(callSpan.StartTime) || a.EndTime.After(callSpan.EndTime) {
			t.Errorf("attempt %d: [%v, %v] not within the call [%v, %v]", i+1, a.StartTime, a.EndTime, callSpan.StartTime, callSpan.EndTime)
		}
	}
	first, second := attrs(attempts[0].Attributes), attrs(attempts[1].Attributes)
	if _, ok := first[idemotel.AttrResendCount]; ok {
		t.Error("the first attempt carries http.request.resend_count; semconv sets it on resends only")
	}
	if first[idemotel.AttrErrorType].AsString() != "timeout" || first[idemotel.AttrClass].AsString() != "unknown" ||
		attempts[0].Status.Code != codes.Error {
		t.Errorf("first attempt: %v, status %v", attempts[0].Attributes, attempts[0].Status)
	}
	if v, ok := second[idemotel.AttrResendCount]; !ok || v.AsInt64() != 1 {
		t.Errorf("second attempt: http.request.resend_count = %v (set %v), want 1", v.AsInt64(), ok)
	}
	if second[idemotel.AttrStatusCode].AsInt64() != http.StatusCreated || second[idemotel.AttrClass].AsString() != "success" {
		t.Errorf("second attempt: %v", attempts[1].Attributes)
	}
	if attempts[1].StartTime.Before(attempts[0].EndTime) {
		t.Error("the resend starts before the first attempt ended")
	}

	var names []string
	for _, e := range callSpan.Events {
		names = append(names, e.Name)
	}
	want := []string{idemotel.EventUnknown, idemotel.EventStatusCheck, idemotel.EventWait}
	if len(names) != len(want) {
		t.Fatalf("events %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("events %v, want %v", names, want)
		}
	}
	if st := attrs(callSpan.Events[1].Attributes)[idemotel.AttrKeyStatus].AsString(); st != "not_found" {
		t.Errorf("status check event: state %q, want not_found", st)
	}
	if w := attrs(callSpan.Events[2].Attributes); w[idemotel.AttrWaitReason].AsString() != "unknown" || w[idemotel.AttrWaitRetryAfter].AsBool() {
		t.Errorf("wait event: %v", callSpan.Events[2].Attributes)
	}
}

// A 503 with Retry-After: 3 is honoured: the wait event says 3 s and retry_after, and the
// client slept exactly that.
func TestTraceRetryAfterWait(t *testing.T) {
	api := idemtest.NewServer(idemtest.Config{RetryAfter: 3})
	t.Cleanup(api.Close)
	api.Script(idemtest.Fault503)
	tr, exp, _ := newTracer(t)
	var sl sleeps
	var retries, attemptsSeen atomic.Int64 // the application's own hooks still run
	c := tracedClient(t, api.URL, tr, func(cfg *idem.Config) {
		cfg.Sleep = sl.sleep
		cfg.Hooks = tr.Hooks(event.Hooks{
			OnRetry:   func(event.Retry) { retries.Add(1) },
			OnAttempt: func(event.Attempt) { attemptsSeen.Add(1) },
		})
	})
	if _, err := tr.Do(context.Background(), c, payment("trace-2")); err != nil {
		t.Fatal(err)
	}
	if len(sl.got) != 1 || sl.got[0] != 3*time.Second {
		t.Fatalf("slept %v, want [3s]", sl.got)
	}
	if retries.Load() != 1 || attemptsSeen.Load() != 2 {
		t.Errorf("the wrapped hooks saw %d retries and %d attempts, want 1 and 2", retries.Load(), attemptsSeen.Load())
	}
	for _, s := range exp.GetSpans() {
		if s.Name != idemotel.CallSpanName {
			continue
		}
		if len(s.Events) != 1 || s.Events[0].Name != idemotel.EventWait {
			t.Fatalf("events %+v, want one wait", s.Events)
		}
		w := attrs(s.Events[0].Attributes)
		if w[idemotel.AttrWaitSeconds].AsFloat64() != 3 || !w[idemotel.AttrWaitRetryAfter].AsBool() || w[idemotel.AttrWaitReason].AsString() != "retry" {
			t.Errorf("wait event: %v", s.Events[0].Attributes)
		}
		return
	}
	t.Fatal("no call span")
}

// A stored 5xx: the call span ends manual (idem.outcome, error status), with the stored
// server error and the lookup (inconclusive) as events; Resolve is then the way out.
func TestTraceStoredServerErrorAndLookup(t *testing.T) {
	api := idemtest.NewServer(idemtest.Config{})
	t.Cleanup(api.Close)
	api.Script(idemtest.FaultStored500)
	tr, exp, _ := newTracer(t)
	var asked atomic.Int64
	lookup := func(context.Context, idem.LookupRequest) (idem.Resolution, error) {
		asked.Add(1)
		return idem.Resolution{}, errors.New("search unavailable")
	}
	c := tracedClient(t, api.URL, tr, func(cfg *idem.Config) { cfg.Lookup = tr.Lookup(lookup) })
	op := payment("trace-3")
	_, err := tr.Do(context.Background(), c, op)
	if !errors.Is(err, idem.ErrStoredServerError) || asked.Load() != 1 {
		t.Fatalf("err %v, lookups %d; want a stored server error after one lookup", err, asked.Load())
	}
	spans := exp.GetSpans()
	s := spans[len(spans)-1]
	if s.Name != idemotel.CallSpanName {
		t.Fatalf("last span %q, want the call span", s.Name)
	}
	a := attrs(s.Attributes)
	if a[idemotel.AttrOutcome].AsString() != idemotel.OutcomeManual || s.Status.Code != codes.Error ||
		a[idemotel.AttrStatusCode].AsInt64() != 500 || a[idemotel.AttrKey].AsString() != op.Key() {
		t.Errorf("call span: %v, status %v", s.Attributes, s.Status)
	}
	var names []string
	for _, e := range s.Events {
		names = append(names, e.Name)
	}
	wantIn := map[string]bool{idemotel.EventStoredServerError: false, idemotel.EventLookup: false}
	for _, n := range names {
		if _, ok := wantIn[n]; ok {
			wantIn[n] = true
		}
	}
	for n, seen := range wantIn {
		if !seen {
			t.Errorf("no %s event in %v", n, names)
		}
	}
}

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, idemotel.OutcomeSucceeded},
		{&idem.OperationError{Kind: idem.ErrPermanent}, idemotel.OutcomeFailed},
		{&idem.OperationError{Kind: idem.ErrNotExecuted}, idemotel.OutcomeFailed},
		{&idem.OperationError{Kind: idem.ErrKeyConflict}, idemotel.OutcomeKeyConflict},
		{&idem.OperationError{Kind: idem.ErrKeyExpired}, idemotel.OutcomeManual},
		{&idem.OperationError{Kind: idem.ErrExhausted}, idemotel.OutcomePending},
		{&idem.OperationError{Kind: idem.ErrCanceled, Unknown: true}, idemotel.OutcomePending},
		{idem.ErrInvalidOperation, idemotel.OutcomeInvalid},
	} {
		if got := idemotel.Outcome(tc.err); got != tc.want {
			t.Errorf("Outcome(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if _, err := idemotel.NewTracer(nil); err == nil {
		t.Error("NewTracer(nil): no error")
	}
}
