package idem

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/keystore"
)

// A RedactFields entry written as a JSON path ("card.number", the way profile rules name
// members) is accepted by NewClient and matches nothing: the secret is stored as sent.
func TestDialectAdversarial2RedactFieldWrittenAsAPathIsRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"pay_1","card":{"number":"4242424242424242"}}`))
	}))
	defer srv.Close()
	store := keystore.NewMemory()
	c, err := NewClient(Config{BaseURL: srv.URL, Store: store, RedactFields: []string{"card.number"}})
	if err != nil {
		t.Logf("refused at NewClient (the fix): %v", err)
		return
	}
	defer c.Close()
	res, err := c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":1}`)))
	require.NoError(t, err)
	rec, err := store.Get(context.Background(), "", res.Key)
	require.NoError(t, err)
	require.NotContains(t, string(rec.Response.Body), "4242424242424242", "stored: %s", rec.Response.Body)
}

// An answer that starts with a UTF-8 byte order mark (or carries trailing bytes after the
// object) is not json.Valid, so redactFields keeps it as it is: the profile's client_secret
// is stored in the clear, although the client reads the same bytes as JSON everywhere else.
func TestDialectAdversarial2RedactFailsClosedOnABodyWithABOM(t *testing.T) {
	for name, body := range map[string]string{
		"bom":      "\xEF\xBB\xBF" + `{"id":"pi_1","client_secret":"pi_1_secret_abc"}`,
		"trailing": `{"id":"pi_1","client_secret":"pi_1_secret_abc"}` + "\n\x00",
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(body))
			}))
			defer srv.Close()
			store := keystore.NewMemory()
			c, err := NewClient(Config{BaseURL: srv.URL, Store: store, RedactFields: []string{"client_secret"}})
			require.NoError(t, err)
			defer c.Close()
			res, err := c.Do(context.Background(), NewOperation(http.MethodPost, "/v1/payment_intents", []byte(`{"amount":1}`)))
			require.NoError(t, err)
			rec, err := store.Get(context.Background(), "", res.Key)
			require.NoError(t, err)
			require.NotContains(t, string(rec.Response.Body), "pi_1_secret_abc", "stored: %q", rec.Response.Body)
		})
	}
}
