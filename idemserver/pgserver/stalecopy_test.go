package pgserver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver/pgserver"
	"github.com/jackc/pgx/v5"
)

// A claim waited without end for a CopyFrom left running by an inner handler after
// http.TimeoutHandler answered: closing its socket does not stop pgx's CopyFrom while the
// application's source is stuck, and every claim method waited for it again (adversarial
// run). A second after closing it the claim gives the connection up: its methods send
// nothing more (the closed connection rolled the transaction back), do not wait again, and
// the connection goes back to the pool to be destroyed once the source returns: 503 after the
// turn timeout and a fifth of it (5 s and 1 s in production; 0.5 s here), not when the
// source returns.
func TestStalledCopyFromCannotHoldTheClaim(t *testing.T) {
	defer pgserver.SetTurnTimeout(500 * time.Millisecond)() // 5 s in production
	stall := make(chan struct{})
	copied := make(chan error, 1)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := pgserver.MustTx(r.Context())
		if err != nil {
			t.Error(err)
			return
		}
		n := 0
		_, err = tx.CopyFrom(context.Background(), pgx.Identifier{"payments"}, []string{"reference", "idem_key", "amount"},
			pgx.CopyFromFunc(func() ([]any, error) {
				n++
				if n == 1 {
					return []any{"copy", "kA", int64(1)}, nil
				}
				<-stall // the upstream stalls
				return nil, nil
			}))
		copied <- err
	})
	_, post := staleServer(t, map[string]http.Handler{"a": http.TimeoutHandler(slow, 100*time.Millisecond, "timed out")})
	done := make(chan int, 1)
	start := time.Now()
	go func() { done <- post("a", "kA") }()
	select {
	case code := <-done:
		t.Logf("answered %d after %s", code, time.Since(start))
	case <-time.After(20 * time.Second):
		close(stall) // unstick it so the test can clean up
		code := <-done
		t.Errorf("no answer after 20 s (the claim's 5 s bound); answered %d only after the source returned, %s in", code, time.Since(start))
		<-copied
		return
	}
	close(stall)
	<-copied
}
