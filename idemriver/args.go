package idemriver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemkit/idem"
)

// Kind is the River job kind of a payment (PaymentArgs.Kind).
const Kind = "idem_payment"

// ErrInvalidPayment: NewPayment or InsertTx was given a payment that can never be sent (no
// reference, no method or URL, a bad key, or anything idem's Client.Do refuses before it
// sends: a reference that is not UTF-8, a method that is not an RFC 9110 token, a URL that
// does not parse, carries user info or has a space in its query, an absolute URL that is not
// http(s) with a host). Nothing is inserted. The error also matches idem.ErrInvalidOperation.
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
// ErrInvalidPayment (also matching idem.ErrInvalidOperation) for args that idem's Client.Do
// would refuse: an empty, too long or non-UTF-8 reference, an empty or malformed method or
// URL (see ErrInvalidPayment).
func NewPayment(reference, method, url string, body []byte) (PaymentArgs, error) {
	key, err := uuid.NewV7()
	if err != nil {
		return PaymentArgs{}, fmt.Errorf("idemriver: minting a key: %w", err)
	}
	a := PaymentArgs{Key: key.String(), Reference: reference, Method: method, URL: url, Body: append([]byte(nil), body...)}
	return a, a.check()
}

// check refuses, before anything is inserted, every args that idem's Client.Do would refuse
// at run time (the job would then be cancelled after its transaction committed). It mirrors
// Do's own validation of an operation (idem's operation.go and client.go), which idem does not
// export, apart from what only the Client knows (a relative URL with no Config.BaseURL).
func (a PaymentArgs) check() error {
	switch {
	case a.Reference == "" || len(a.Reference) > idem.MaxIntentLength:
		return fmt.Errorf("%w: %w: reference must be 1 to %d bytes, got %d", ErrInvalidPayment, idem.ErrInvalidOperation, idem.MaxIntentLength, len(a.Reference))
	case !utf8.ValidString(a.Reference):
		return fmt.Errorf("%w: %w: reference %q is not valid UTF-8", ErrInvalidPayment, idem.ErrInvalidOperation, a.Reference)
	case a.Method == "" || a.URL == "":
		return fmt.Errorf("%w: %w: method and URL are required", ErrInvalidPayment, idem.ErrInvalidOperation)
	case !isToken(a.Method):
		return fmt.Errorf("%w: %w: bad method %q (an RFC 9110 token)", ErrInvalidPayment, idem.ErrInvalidOperation, a.Method)
	}
	if err := idem.ValidateKey(a.Key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidPayment, err)
	}
	u, err := url.Parse(a.URL)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w: bad URL %q: %v", ErrInvalidPayment, idem.ErrInvalidOperation, a.URL, err)
	case u.User != nil: // the URL is persisted with the record: never a password with it
		return fmt.Errorf("%w: %w: URL carries user info, which would be persisted; use idem.Config.Credentials", ErrInvalidPayment, idem.ErrInvalidOperation)
	case strings.IndexByte(u.RawQuery, ' ') >= 0: // breaks the request line (RFC 9112 §3)
		return fmt.Errorf("%w: %w: URL %q has a space in its query; escape it (%%20 or +)", ErrInvalidPayment, idem.ErrInvalidOperation, a.URL)
	case u.IsAbs() && (u.Scheme != "http" && u.Scheme != "https" || u.Host == ""):
		return fmt.Errorf("%w: %w: URL %q is not http(s) with a host", ErrInvalidPayment, idem.ErrInvalidOperation, a.URL)
	}
	return nil
}

// isToken reports whether s is an RFC 9110 §5.6.2 token, which a method must be.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
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
