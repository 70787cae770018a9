package idemriver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Every Do outcome maps to one River decision; a stored 5xx (which also matches
// ErrOutcomeUnknown) is held as manual, never snoozed as pending or cancelled.
func TestDecide(t *testing.T) {
	ws := waits{pending: 30 * time.Second, manual: 5 * time.Minute}
	op := func(kind error, ra time.Duration) error {
		return &idem.OperationError{Key: "k", Kind: kind, RetryAfter: ra, Unknown: kind == idem.ErrOutcomeUnknown}
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	timedOut, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	bg := context.Background()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want decision
	}{
		{"stored 5xx", bg, &idem.OperationError{Kind: idem.ErrStoredServerError, Unknown: true}, decision{decideSnooze, 5 * time.Minute}},
		{"key expired", bg, op(idem.ErrKeyExpired, 0), decision{decideSnooze, 5 * time.Minute}},
		{"permanent", bg, op(idem.ErrPermanent, 0), decision{decideCancel, 0}},
		{"not executed", bg, op(idem.ErrNotExecuted, 0), decision{decideCancel, 0}},
		{"key conflict", bg, op(idem.ErrKeyConflict, 0), decision{decideCancel, 0}},
		{"invalid operation", bg, fmt.Errorf("%w: bad method", idem.ErrInvalidOperation), decision{decideCancel, 0}},
		{"unknown", bg, op(idem.ErrOutcomeUnknown, 0), decision{decideSnooze, 30 * time.Second}},
		{"exhausted", bg, op(idem.ErrExhausted, 0), decision{decideSnooze, 30 * time.Second}},
		{"budget", bg, op(idem.ErrBudgetExhausted, 0), decision{decideSnooze, 30 * time.Second}},
		{"retry-after too long", bg, op(idem.ErrRetryAfterTooLong, 2*time.Minute), decision{decideSnooze, 2 * time.Minute}},
		{"shutdown", canceled, op(idem.ErrCanceled, 0), decision{decideSnooze, 0}},
		{"run timed out", timedOut, op(idem.ErrCanceled, 0), decision{decideSnooze, 30 * time.Second}},
		{"keystore down before the send", bg, errors.New("dial tcp: connection refused"), decision{decideRetry, 0}},
	} {
		if got := decide(tc.ctx, tc.err, ws); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestNewPaymentChecks(t *testing.T) {
	a, err := NewPayment("order-1", "POST", "/v1/payments", []byte(`{}`))
	if err != nil || idem.ValidateKey(a.Key) != nil || a.Kind() != Kind {
		t.Fatalf("%+v, %v", a, err)
	}
	b, _ := NewPayment("order-1", "POST", "/v1/payments", []byte(`{}`))
	if a.Key == b.Key {
		t.Error("two intents share a key")
	}
	if op := a.Operation(); op.Key() != a.Key || op.Intent() != "order-1" || op.Method() != "POST" {
		t.Errorf("operation key %q intent %q", op.Key(), op.Intent())
	}
	for _, bad := range []PaymentArgs{
		{Key: a.Key, Method: "POST", URL: "/p"},
		{Key: a.Key, Reference: "r", URL: "/p"},
		{Key: a.Key, Reference: "r", Method: "POST"},
		{Key: "", Reference: "r", Method: "POST", URL: "/p"},
	} {
		if err := bad.check(); !errors.Is(err, ErrInvalidPayment) {
			t.Errorf("%+v: %v, want ErrInvalidPayment", bad, err)
		}
		if _, err := InsertTx[struct{}](context.Background(), nil, struct{}{}, bad, nil); !errors.Is(err, ErrInvalidPayment) {
			t.Errorf("InsertTx %+v: %v, want ErrInvalidPayment", bad, err)
		}
	}
}
