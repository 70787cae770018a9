package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/webhook"
)

// A handler for a provider's payment notifications, in the shape of Adyen's AUTHORISATION
// event: the HMAC signature is checked first, then the event settles the manual record of
// its merchant reference (a stored 500 the cancel route has not settled yet, say).
func ExampleHandler() {
	var client *idem.Client // the application's idem client
	hmacKey := []byte("whsec_...")
	h := &webhook.Handler{
		Client: client,
		Verify: func(r *http.Request, body []byte) error {
			m := hmac.New(sha256.New, hmacKey)
			m.Write(body)
			if !hmac.Equal([]byte(r.Header.Get("X-Signature")), []byte(hex.EncodeToString(m.Sum(nil)))) {
				return errors.New("bad signature")
			}
			return nil
		},
		Parse: func(body []byte) (webhook.Event, error) {
			var n struct {
				MerchantReference string `json:"merchantReference"`
				PSPReference      string `json:"pspReference"`
				Success           string `json:"success"`
			}
			if err := json.Unmarshal(body, &n); err != nil || n.MerchantReference == "" {
				return webhook.Event{}, errors.New("not an AUTHORISATION notification")
			}
			if n.Success != "true" {
				// A refusal names no key: by reference alone it could be about another
				// attempt of the order, so it is left to the record's own route.
				return webhook.Event{}, errors.New("a refusal settles nothing by reference")
			}
			return webhook.Event{Reference: n.MerchantReference, Verdict: idem.VerdictExecuted,
				Response: &keystore.Response{StatusCode: http.StatusOK, Body: body},
				Note:     "AUTHORISATION " + n.PSPReference}, nil
		},
	}
	http.Handle("/hooks/adyen", h)
}
