package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

const secret = "whsec_test"

func sign(body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// adyenLike is an event in the shape of an Adyen AUTHORISATION notification.
func parse(body []byte) (Event, error) {
	var n struct {
		MerchantReference string `json:"merchantReference"`
		Success           string `json:"success"`
		PSPReference      string `json:"pspReference"`
	}
	if err := json.Unmarshal(body, &n); err != nil || n.MerchantReference == "" {
		return Event{}, errors.New("not an AUTHORISATION notification")
	}
	ev := Event{Reference: n.MerchantReference, Verdict: idem.VerdictNotExecuted, Note: "webhook AUTHORISATION " + n.PSPReference}
	if n.Success == "true" {
		ev.Verdict = idem.VerdictExecuted
		ev.Response = &keystore.Response{StatusCode: 200, Body: []byte(`{"id":"` + n.PSPReference + `"}`)}
	}
	return ev, nil
}

// setup makes one manual record (a 500 the API says not to retry) and one pending record.
func setup(t *testing.T) (*idem.Client, keystore.Store) {
	t.Helper()
	calls := 0
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.WriteHeader(http.StatusInternalServerError) // no transient-error: never retried
			return
		}
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close() // an unknown outcome: the record stays pending
	}))
	t.Cleanup(api.Close)
	p := syncAdyen.Clone()
	p.Settle = []profile.Route{{Kind: profile.Resend}, {Kind: profile.Person}} // no cancel: a person or a webhook settles
	store := keystore.NewMemory()
	c, err := idem.NewClient(idem.Config{BaseURL: api.URL, Store: store, Profile: p,
		Policy: idem.Policy{MaxAttempts: 1}, Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.Do(context.Background(), idem.NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":1,"reference":"ord-1"}`)))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	_, err = c.Do(context.Background(), idem.NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":1,"reference":"ord-2"}`)))
	require.ErrorIs(t, err, idem.ErrOutcomeUnknown)
	return c, store
}

func post(t *testing.T, h http.Handler, body string, sig string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/hooks/adyen", strings.NewReader(body))
	req.Header.Set("X-Signature", sig)
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	return rr
}

func TestHandlerSettlesByReference(t *testing.T) {
	c, store := setup(t)
	verify := func(r *http.Request, body []byte) error {
		if !hmac.Equal([]byte(r.Header.Get("X-Signature")), []byte(sign(body))) {
			return errors.New("bad signature")
		}
		return nil
	}
	ev := `{"merchantReference":"ord-1","success":"true","pspReference":"psp_9"}`

	// Without Verify, every event is refused, and nothing is written.
	assert.Equal(t, http.StatusUnauthorized, post(t, &Handler{Client: c, Parse: parse}, ev, sign([]byte(ev))).Code)
	h := &Handler{Client: c, Verify: verify, Parse: parse}
	assert.Equal(t, http.StatusUnauthorized, post(t, h, ev, "forged").Code)
	manual, err := store.List(context.Background(), keystore.StateManual)
	require.NoError(t, err)
	require.Len(t, manual, 1, "refused events change nothing")

	assert.Equal(t, http.StatusOK, post(t, h, ev, sign([]byte(ev))).Code)
	rec, err := store.Get(context.Background(), "", manual[0].Key)
	require.NoError(t, err)
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.JSONEq(t, `{"id":"psp_9"}`, string(rec.Response.Body))
	assert.Contains(t, rec.Note, "psp_9")

	// Delivered again: the record is settled, the first verdict stands; acknowledged.
	assert.Equal(t, http.StatusOK, post(t, h, ev, sign([]byte(ev))).Code)
	// A refusal named by reference only could be about another attempt of the order (a
	// late event of an earlier try): refused, nothing written.
	no := `{"merchantReference":"ord-1","success":"false","pspReference":"psp_8"}`
	assert.Equal(t, http.StatusBadRequest, post(t, h, no, sign([]byte(no))).Code)
	rec, _ = store.Get(context.Background(), "", manual[0].Key)
	assert.Equal(t, keystore.StateSucceeded, rec.State)

	// A pending record is still being worked on: deliver later.
	pend := `{"merchantReference":"ord-2","success":"true","pspReference":"psp_10"}`
	assert.Equal(t, http.StatusConflict, post(t, h, pend, sign([]byte(pend))).Code, "still pending: deliver again later")
	other := `{"merchantReference":"ord-9","success":"true","pspReference":"psp_11"}`
	assert.Equal(t, http.StatusAccepted, post(t, h, other, sign([]byte(other))).Code, "no record: a payment idem did not make")

	bad := `{"nope":1}`
	assert.Equal(t, http.StatusBadRequest, post(t, h, bad, sign([]byte(bad))).Code)
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/hooks/adyen", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rr.Code)
	big := strings.Repeat("x", MaxEventSize+1)
	assert.Equal(t, http.StatusRequestEntityTooLarge, post(t, h, big, sign([]byte(big))).Code)
}

func TestSettleByKey(t *testing.T) {
	c, store := setup(t)
	pending, err := store.List(context.Background(), keystore.StatePending)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	_, err = Settle(context.Background(), c, Event{Key: pending[0].Key, Verdict: idem.VerdictExecuted})
	require.ErrorIs(t, err, ErrStillPending)
	require.ErrorIs(t, err, idem.ErrNotManual)
	_, err = Settle(context.Background(), c, Event{Key: "nope", Verdict: idem.VerdictExecuted})
	require.ErrorIs(t, err, ErrNoRecord)
	_, err = Settle(context.Background(), c, Event{Verdict: idem.VerdictExecuted})
	require.ErrorIs(t, err, idem.ErrInvalidOperation)

	manual, _ := store.List(context.Background(), keystore.StateManual)
	require.Len(t, manual, 1)
	got, err := Settle(context.Background(), c, Event{Key: manual[0].Key, Verdict: idem.VerdictNotExecuted, Note: "refused"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, keystore.StateFailed, got[0].State)
	_, err = c.Do(context.Background(), idem.NewOperation(http.MethodPost, "/v1/payments", manual[0].Request.Body, idem.WithKey(manual[0].Key)))
	require.ErrorIs(t, err, idem.ErrNotExecuted)
}
