package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/examples/oapi/payments"
)

// outcome is what became of one payment.
type outcome struct {
	Reference string
	Payment   *payments.Payment // the 201 body, when paid
	Status    int               // final HTTP status, 0 when the call ended in an error
	Err       error             // an *idem.OperationError (through *url.Error) when not answered
}

// payAll creates one payment per reference through the generated client. The client knows
// nothing of idem: its *http.Client comes from idem.NewHTTPClient, and each request's
// context names the intent (the order reference), so that a call that ends with an unknown
// outcome can be made again and continue the same persisted key.
func payAll(ctx context.Context, c *idem.Client, serverURL string, refs []string, amount func(i int) int64) ([]outcome, error) {
	api, err := payments.NewClientWithResponses(serverURL, payments.WithHTTPClient(idem.NewHTTPClient(c)))
	if err != nil {
		return nil, err
	}
	out := make([]outcome, 0, len(refs))
	for i, ref := range refs {
		o := outcome{Reference: ref}
		body := payments.PaymentRequest{Amount: amount(i), Currency: "EUR", Customer: "cus_" + ref, Reference: &ref}
		for try := 0; try < 3; try++ { // the same intent each time: the same key, never a second charge
			resp, err := api.CreatePaymentWithResponse(idem.ContextWithIntent(ctx, ref), nil, body)
			if err != nil {
				o.Err = err
				if errors.Is(err, idem.ErrOutcomeUnknown) || errors.Is(err, idem.ErrExhausted) ||
					errors.Is(err, idem.ErrRetryAfterTooLong) || errors.Is(err, idem.ErrBudgetExhausted) {
					continue
				}
				break
			}
			o.Err, o.Status, o.Payment = nil, resp.StatusCode(), resp.JSON201
			break
		}
		out = append(out, o)
	}
	return out, nil
}

// summarize counts the outcomes: paid (any 2xx: the 201, or a payment Config.Lookup found),
// declined (a 4xx answer) and unresolved (an error: the record stays in the keystore for
// Recover or a person).
func summarize(out []outcome) (paid, declined, unresolved int) {
	for _, o := range out {
		switch {
		case o.Err != nil:
			unresolved++
		case o.Status/100 == 2:
			paid++
		default:
			declined++
		}
	}
	return
}

func (o outcome) String() string {
	switch {
	case o.Err != nil:
		return fmt.Sprintf("%s: unresolved: %v", o.Reference, o.Err)
	case o.Payment != nil:
		return fmt.Sprintf("%s: paid %s", o.Reference, o.Payment.Id)
	case o.Status/100 == 2:
		return fmt.Sprintf("%s: paid (HTTP %d)", o.Reference, o.Status)
	}
	return fmt.Sprintf("%s: declined (%d)", o.Reference, o.Status)
}
