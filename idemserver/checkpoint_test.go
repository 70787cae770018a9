package idemserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/servertest"
)

// TestCheckpointRefusesAnEmptyPoint: Checkpoint(r, "") returns ErrEmptyRecoveryPoint and
// changes nothing: RecoveryPoint(r) stays "" and the handler carries on in its phase. Accepted
// before, it committed the phase (pgserver) with recovery point "", which a takeover read as a
// fresh start and ran the committed phase again (adversarial run). A backend's Claim refuses
// it too, for a caller other than the middleware.
func TestCheckpointRefusesAnEmptyPoint(t *testing.T) {
	for _, tc := range []struct {
		point     string
		wantErr   error
		wantPoint string // RecoveryPoint(r) after the Checkpoint
	}{
		{point: "", wantErr: idemserver.ErrEmptyRecoveryPoint, wantPoint: ""},
		{point: "created", wantErr: nil, wantPoint: "created"},
	} {
		t.Run("point "+tc.point, func(t *testing.T) {
			var (
				cpErr error
				point string
				runs  int
			)
			mw, err := idemserver.New(idemserver.Config{Backend: idemserver.NewMemory(),
				Tenant: func(*http.Request) (string, error) { return "acct_1", nil }})
			require.NoError(t, err)
			srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				cpErr = idemserver.Checkpoint(r, tc.point)
				point = idemserver.RecoveryPoint(r)
				w.WriteHeader(http.StatusCreated)
			})))
			defer srv.Close()
			post := func() (int, string) {
				req, err := http.NewRequest("POST", srv.URL+"/v1/payments", strings.NewReader("{}"))
				require.NoError(t, err)
				req.Header.Set("Idempotency-Key", "k-point")
				resp, err := srv.Client().Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				return resp.StatusCode, resp.Header.Get(idemserver.ReplayedHeader)
			}
			code, replayed := post()
			assert.Equal(t, http.StatusCreated, code)
			assert.Equal(t, "", replayed)
			assert.ErrorIs(t, cpErr, tc.wantErr)
			if tc.wantErr == nil {
				assert.NoError(t, cpErr)
			}
			assert.Equal(t, tc.wantPoint, point)
			code, replayed = post() // the answer was stored either way: execution began at entry
			assert.Equal(t, http.StatusCreated, code)
			assert.Equal(t, "true", replayed)
			assert.Equal(t, 1, runs)
		})
	}

	t.Run("backend", func(t *testing.T) {
		ctx := context.Background()
		b := idemserver.NewMemory()
		now := servertest.NewClock().Now()
		s := idemserver.Scope{Tenant: "acct_1", Operation: "POST /v1/payments", Key: "k-empty"}
		c, rec, err := b.Claim(ctx, idemserver.ClaimRequest{Scope: s, Fingerprint: []byte("fp"), Now: now, Lease: time.Minute})
		require.NoError(t, err)
		require.Nil(t, rec)
		require.ErrorIs(t, c.Checkpoint(ctx, "", now, time.Minute), idemserver.ErrEmptyRecoveryPoint)
		require.NoError(t, c.Release(ctx))
		// Nothing was committed: the released key is free at once, not held for the lease.
		rec, err = b.Lookup(ctx, s, now)
		require.NoError(t, err)
		assert.Nil(t, rec)
	})
}
