package idemriver

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemkit/idem"
)

// Kind is the River job kind of a payment (PaymentArgs.Kind).
const Kind = "idem_payment"

// ErrInvalidPayment: NewPayment or InsertTx was given a payment that can never be sent (no
// reference, no method or URL, a bad key). Nothing is inserted.
var ErrInvalidPayment = errors.New("idemriver: invalid payment")

// PaymentArgs is a payment job's args: the outbox row. It holds no credentials (the idem
// Client adds them at send time, idem.Config.Credentials): a job row is readable by anyone
// who can read the queue.
type PaymentArgs struct {
	// Key is the idempotency key, minted by NewPayment when the job is inserted (a UUIDv7)
	// and the same at every run of the job.
	Key string `json:"key"`
	// Reference is the business reference (the order id): the idem intent, at most
	// idem.MaxIntentLength bytes.
	Reference string `json:"reference"`
	// Method is the request's HTTP method (POST for a payment).
	Method string `json:"method"`
	// URL is the request's URL, relative to idem.Config.BaseURL, or absolute.
	URL string `json:"url"`
	// Body is the request body, byte for byte (base64 in the job's JSON).
	Body []byte `json:"body,omitempty"`
}

// Kind returns Kind ("idem_payment"), River's name for the job's worker.
func (PaymentArgs) Kind() string { return Kind }

// NewPayment returns the args of a payment intent with a fresh key (a UUIDv7). It returns
// ErrInvalidPayment for an empty or too long reference, or an empty method or URL.
func NewPayment(reference, method, url string, body []byte) (PaymentArgs, error) {
	key, err := uuid.NewV7()
	if err != nil {
		return PaymentArgs{}, fmt.Errorf("idemriver: minting a key: %w", err)
	}
	a := PaymentArgs{Key: key.String(), Reference: reference, Method: method, URL: url, Body: append([]byte(nil), body...)}
	return a, a.check()
}

func (a PaymentArgs) check() error {
	switch {
	case a.Reference == "" || len(a.Reference) > idem.MaxIntentLength:
		return fmt.Errorf("%w: reference must be 1 to %d bytes, got %d", ErrInvalidPayment, idem.MaxIntentLength, len(a.Reference))
	case a.Method == "" || a.URL == "":
		return fmt.Errorf("%w: method and URL are required", ErrInvalidPayment)
	}
	if err := idem.ValidateKey(a.Key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidPayment, err)
	}
	return nil
}

// Operation is the idem operation the job sends: the args' request under the args' key,
// with the reference as intent.
func (a PaymentArgs) Operation() *idem.Operation {
	return idem.NewOperation(a.Method, a.URL, a.Body, idem.WithKey(a.Key), idem.WithIntent(a.Reference))
}

// InsertTx inserts the payment job in tx, the application's business transaction (River's
// Client.InsertTx): committed with it, or rolled back with it. It returns ErrInvalidPayment
// (nothing inserted) for args that could never be sent, else River's result and error.
func InsertTx[TTx any](ctx context.Context, rc *river.Client[TTx], tx TTx, args PaymentArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	if err := args.check(); err != nil {
		return nil, err
	}
	if rc == nil {
		return nil, errors.New("idemriver: nil River client")
	}
	return rc.InsertTx(ctx, tx, args, opts)
}
