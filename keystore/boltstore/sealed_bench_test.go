package boltstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// BenchmarkDurableCallSealed measures one durable call (Do of a new intent: the pending
// record committed before the send, the answer written after) with plaintext bodies and with
// bodies sealed by a key ring (AES-256-GCM), at 1 and 8 concurrent callers, in the same run:
// compare mode=sealed with mode=plain (benchstat -col /mode). Request body ~500 bytes,
// answer ~300 bytes. Set TMPDIR to a real disk for figures that include fsync as deployed.
func BenchmarkDurableCallSealed(b *testing.B) {
	answer := `{"id":"pi_1","client_secret":"pi_1_secret_` + strings.Repeat("s", 240) + `"}`
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, answer)
	}))
	defer api.Close()
	body := []byte(`{"amount":1000,"currency":"eur","card":"4242424242424242","description":"` + strings.Repeat("x", 420) + `"}`)
	for _, c := range []int{1, 8} {
		for _, mode := range []string{"plain", "sealed"} {
			b.Run(fmt.Sprintf("mode=%s/c=%d", mode, c), func(b *testing.B) {
				opts := &boltstore.Options{}
				if mode == "sealed" {
					opts.KeyRing = ring(b, "k1", "k1")
				}
				s, err := boltstore.Open(filepath.Join(b.TempDir(), "keys.db"), opts)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				cl, err := idem.NewClient(idem.Config{BaseURL: api.URL, Store: s})
				if err != nil {
					b.Fatal(err)
				}
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for range c {
					wg.Go(func() {
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							op := idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent(fmt.Sprint("ord-", i)))
							if _, err := cl.Do(context.Background(), op); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}

var _ = keystore.StatePending
