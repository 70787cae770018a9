package idemotel

import (
	"context"
	"errors"
	"net/http/httptrace"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/event"
)

// ScopeName is the instrumentation scope of the spans a Tracer records (the tracer name
// asked of the TracerProvider).
const ScopeName = "github.com/idemkit/idem/idemotel"

// Span and attribute names. The attempt spans follow OpenTelemetry's HTTP client semantic
// conventions (stable since semconv v1.23.0): span name = the method, kind client,
// http.request.method, http.response.status_code, error.type, and http.request.resend_count,
// "the ordinal number of request resending attempt", set on resends only (1 on the second
// attempt, absent on the first). The idem.* names are this package's own.
const (
	CallSpanName = "idem.call" // one span per Tracer.Do: the whole call, waits included

	AttrKey           = attribute.Key("idem.key")             // the idempotency key (as sent)
	AttrIntent        = attribute.Key("idem.intent")          // the caller-named intent, if any
	AttrOutcome       = attribute.Key("idem.outcome")         // see the Outcome* values
	AttrErrorKind     = attribute.Key("idem.error.kind")      // the sentinel's text, when the call did not succeed
	AttrOutcomeUnsure = attribute.Key("idem.outcome_unknown") // an attempt may have executed and was not resolved
	AttrSource        = attribute.Key("idem.source")          // where a success came from (response, replay, status, store, lookup)
	AttrAttempts      = attribute.Key("idem.attempts")        // requests sent in the call
	AttrStatusChecks  = attribute.Key("idem.status_checks")   // status-endpoint asks in the call
	AttrClass         = attribute.Key("idem.attempt.class")   // what idem made of an attempt (success, retry, unknown...)
	AttrWritten       = attribute.Key("idem.attempt.written")
	AttrResendCount   = attribute.Key("http.request.resend_count")
	AttrMethod        = attribute.Key("http.request.method")
	AttrStatusCode    = attribute.Key("http.response.status_code")
	AttrErrorType     = attribute.Key("error.type")
)

// Values of idem.outcome on a call span.
const (
	OutcomeSucceeded   = "succeeded"    // a 2xx answer (Result.Source says from where)
	OutcomeFailed      = "failed"       // ErrPermanent or ErrNotExecuted: the payment did not happen
	OutcomeKeyConflict = "key_conflict" // ErrKeyConflict: this request refused; the key's holder may have been charged
	OutcomeManual      = "manual"       // ErrStoredServerError or ErrKeyExpired: a lookup or a person settles it (Client.Resolve)
	OutcomePending     = "pending"      // the record stays pending (unknown, exhausted, deadline, budget, canceled...): Do again or Recover
	OutcomeInvalid     = "invalid"      // refused before anything was persisted (invalid operation, config or policy, keystore error)
)

// Event names on a call span. Each carries the call's attempt count so far (idem.attempts).
const (
	EventStatusCheck       = "idem.status_check"        // idem.key_status.state, error.message
	EventWait              = "idem.wait"                // before a resend: idem.wait.seconds, idem.wait.reason, idem.wait.retry_after
	EventInProgress        = "idem.in_progress"         // a 409: idem.wait.seconds
	EventUnknown           = "idem.unknown"             // an attempt's outcome became unknown
	EventReplay            = "idem.replay"              // the server replayed a stored answer
	EventKeyConflict       = "idem.key_conflict"        // a 422 (or a local refusal)
	EventBudgetDenied      = "idem.budget_denied"       // the retry budget refused a retry
	EventKeyExpired        = "idem.key_expired"         // an unknown outcome past KeyTTL
	EventStoredServerError = "idem.stored_server_error" // a stored 5xx: record manual
	EventLookup            = "idem.lookup"              // Config.Lookup was asked (Tracer.Lookup): idem.lookup.verdict
	EventResolved          = "idem.resolved"            // a manual record was settled
	EventGiveUp            = "idem.give_up"             // the call ended without a result
)

// Tracer records OpenTelemetry spans for idem calls, built on event.Hooks (idem.Config.Hooks): a span named
// idem.call per Tracer.Do, child of the span in the caller's context (a job's, an
// activity's), and under it one client span per attempt carrying http.request.resend_count;
// status checks, waits (with the server's Retry-After when it set the delay), 409 waits,
// unknown outcomes, replays, key conflicts, budget denials, business lookups and give-ups
// are events on the call span, the key and the outcome its attributes.
//
// Wire it in at NewClient: Config.Hooks = tr.Hooks(otherHooks), and Config.Lookup =
// tr.Lookup(lookup) to see lookups; then send with tr.Do(ctx, client, op) instead of
// client.Do. Events of calls not made through Tr.Do (Recover's records, a plain Client.Do)
// are passed on to the wrapped hooks but record nothing: a hook has no context to find a
// parent in. A Tracer may serve several clients and is safe for concurrent use.
//
// Timing: a call span lasts the whole Do. An attempt span starts when its request asks for
// a connection (net/http/httptrace GetConn, composed into the call's context, so a caller's
// own ClientTrace keeps working) and ends when idem has classified the answer (the
// OnAttempt hook); an attempt that never reached GetConn starts at the previous event. So
// waits lie between attempt spans, never inside one. resend_count counts within the call:
// a step that an engine retries starts a new call (same key; idem asks before resending),
// whose first attempt has no resend_count, and the engine's own span shows that retry.
type Tracer struct {
	tracer trace.Tracer

	mu       sync.Mutex
	byKey    map[string][]*callTrace
	byIntent map[string][]*callTrace
}

// NewTracer returns a Tracer recording through tp (its Tracer(ScopeName)). It returns an
// error for a nil provider.
func NewTracer(tp trace.TracerProvider) (*Tracer, error) {
	if tp == nil {
		return nil, errors.New("idemotel: nil tracer provider")
	}
	return &Tracer{tracer: tp.Tracer(ScopeName), byKey: map[string][]*callTrace{}, byIntent: map[string][]*callTrace{}}, nil
}

// callTrace is the state of one traced call. Its hooks run on the calling goroutine, but a
// few (OnClaimLost, Recover's) may not: mu guards everything.
type callTrace struct {
	ctx    context.Context // carries the call span: the parent of attempt spans
	span   trace.Span
	tracer trace.Tracer
	method string

	mu        sync.Mutex
	boundary  time.Time // the last event: where an attempt without a GetConn starts
	reqStart  time.Time // the first GetConn since the boundary (zero: none)
	statusAsk int
}

// Do is client.Do(ctx, op, opts...) inside an idem.call span, a child of ctx's span. The
// result and error are client.Do's, unchanged (see idem.Client.Do). A nil ctx or op is passed
// straight to client.Do, which refuses it, and no span is recorded.
func (t *Tracer) Do(ctx context.Context, client *idem.Client, op *idem.Operation, opts ...idem.CallOption) (*idem.Result, error) {
	if ctx == nil || op == nil {
		return client.Do(ctx, op, opts...)
	}
	attrs := []attribute.KeyValue{AttrKey.String(op.Key()), AttrMethod.String(op.Method())}
	if op.Intent() != "" {
		attrs = append(attrs, AttrIntent.String(op.Intent()))
	}
	ctx, span := t.tracer.Start(ctx, CallSpanName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	ct := &callTrace{ctx: ctx, span: span, tracer: t.tracer, method: op.Method(), boundary: time.Now()}
	t.register(op.Key(), op.Intent(), ct)
	defer t.unregister(op.Key(), op.Intent(), ct)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GetConn: func(string) { ct.requestStarted() }})

	res, err := client.Do(ctx, op, opts...)
	ct.end(res, err)
	return res, err
}

func (ct *callTrace) requestStarted() {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.reqStart.IsZero() {
		ct.reqStart = time.Now()
	}
}

// event adds an event to the call span and moves the boundary.
func (ct *callTrace) event(name string, attempts int, attrs ...attribute.KeyValue) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	now := time.Now()
	ct.boundary, ct.reqStart = now, time.Time{}
	attrs = append(attrs, AttrAttempts.Int(attempts))
	ct.span.AddEvent(name, trace.WithTimestamp(now), trace.WithAttributes(attrs...))
}

// attempt records the classified attempt as a child span.
func (ct *callTrace) attempt(ev event.Attempt) {
	ct.mu.Lock()
	start := ct.reqStart
	if start.IsZero() {
		start = ct.boundary
	}
	end := time.Now()
	ct.boundary, ct.reqStart = end, time.Time{}
	ct.mu.Unlock()

	attrs := []attribute.KeyValue{AttrMethod.String(ct.method), AttrKey.String(ev.Key),
		AttrClass.String(ev.Class.String()), AttrWritten.Bool(ev.Written)}
	if ev.Attempt > 1 {
		attrs = append(attrs, AttrResendCount.Int(ev.Attempt-1))
	}
	if ev.StatusCode > 0 {
		attrs = append(attrs, AttrStatusCode.Int(ev.StatusCode))
	}
	errType := ""
	switch {
	case ev.Err != nil && errors.Is(ev.Err, context.DeadlineExceeded):
		errType = "timeout"
	case ev.Err != nil:
		errType = "transport"
	case ev.StatusCode >= 400:
		errType = strconv.Itoa(ev.StatusCode) // semconv: the status code as a string
	}
	_, span := ct.tracer.Start(ct.ctx, ct.method,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if errType != "" {
		span.SetAttributes(AttrErrorType.String(errType))
		span.SetStatus(codes.Error, errType)
	}
	span.End(trace.WithTimestamp(end))
}

// end sets the outcome on the call span and ends it.
func (ct *callTrace) end(res *idem.Result, err error) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	s := ct.span
	if err == nil {
		s.SetAttributes(AttrOutcome.String(OutcomeSucceeded), AttrKey.String(res.Key), AttrSource.String(string(res.Source)),
			AttrAttempts.Int(res.Attempts), AttrStatusChecks.Int(res.KeyStatusChecks), AttrStatusCode.Int(res.StatusCode))
		s.End()
		return
	}
	s.SetAttributes(AttrOutcome.String(Outcome(err)), AttrStatusChecks.Int(ct.statusAsk))
	var oe *idem.OperationError
	if errors.As(err, &oe) {
		s.SetAttributes(AttrKey.String(oe.Key), AttrAttempts.Int(oe.Attempts), AttrOutcomeUnsure.Bool(oe.Unknown))
		if oe.Kind != nil {
			s.SetAttributes(AttrErrorKind.String(oe.Kind.Error()))
		}
		if oe.LastStatusCode != 0 {
			s.SetAttributes(AttrStatusCode.Int(oe.LastStatusCode))
		}
	}
	s.SetStatus(codes.Error, err.Error())
	s.End()
}

// Outcome names what a Do error means for the record, as the idem.outcome attribute does:
// OutcomeSucceeded for nil, OutcomeManual, OutcomeFailed, OutcomeKeyConflict, OutcomePending
// for any other *idem.OperationError, OutcomeInvalid for an error before anything was
// persisted.
func Outcome(err error) string {
	var oe *idem.OperationError
	switch {
	case err == nil:
		return OutcomeSucceeded
	case errors.Is(err, idem.ErrStoredServerError), errors.Is(err, idem.ErrKeyExpired):
		return OutcomeManual
	case errors.Is(err, idem.ErrPermanent), errors.Is(err, idem.ErrNotExecuted):
		return OutcomeFailed
	case errors.Is(err, idem.ErrKeyConflict):
		return OutcomeKeyConflict
	case errors.As(err, &oe):
		return OutcomePending
	}
	return OutcomeInvalid
}
