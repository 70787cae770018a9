package idemadmin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/profile"
)

// An operator's resolve while a cancel by reference sent for the record may still land is
// refused with 409 (idem.ErrCancelInFlight), and nothing is written.
func TestResolveDuringACancelAnswers409(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError) // Adyen's stored error
	}))
	defer api.Close()
	store := keystore.NewMemory()
	c, err := idem.NewClient(idem.Config{BaseURL: api.URL, Store: store, Profile: profile.Adyen,
		Policy: idem.Policy{MaxAttempts: 1}, Budget: idem.BudgetConfig{Disabled: true}})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	_, err = c.Do(ctx, idem.NewOperation(http.MethodPost, "/v1/payments", []byte(`{"reference":"ord-x"}`), idem.WithIntent("ord-x#0")))
	require.ErrorIs(t, err, idem.ErrStoredServerError)
	rec, err := store.GetByIntent(ctx, "", "ord-x#0")
	require.NoError(t, err)
	// Another instance's cancel is on its way (its claim's Owner carries the "/cancel" mark).
	_, err = store.ClaimManual(ctx, "", rec.Key, keystore.Lease{Owner: "inst-b/cancel", Now: time.Now(), Until: time.Now().Add(time.Minute)})
	require.NoError(t, err)

	h := NewHandler(c, Options{Authorize: func(*http.Request) error { return nil }})
	code, _, body := adminDo(t, h, http.MethodPost, "/resolve", `{"intent":"ord-x#0","verdict":"not_executed","note":"ops"}`, true)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "cancel by reference")
	got, err := store.Get(ctx, "", rec.Key)
	require.NoError(t, err)
	require.Equal(t, keystore.StateManual, got.State, "nothing written")
}
