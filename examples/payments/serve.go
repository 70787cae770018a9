package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemkit/idem/idemtest"
)

// serverConfig is the fault-injecting API of a run, embedded or served with -serve: every
// fault, the charge-then-store-500 one included, at -fault-rate, from -seed.
func serverConfig(o options) idemtest.Config {
	return idemtest.Config{
		Dialect:            o.dialect,
		SearchLag:          embeddedSearchLag, // the stripe dialects' only; the profile is tuned to it
		FaultRate:          o.faultRate,
		Seed:               o.seed,
		Faults:             idemtest.AllFaults(),
		KeyStatusFaultRate: 0.05,
		SlowDelay:          slowDelay, // > the 150ms attempt timeout: an unknown outcome
		RetryAfter:         1,         // seconds; real waits, so throttling shows
	}
}

// serve runs the API standalone on o.serve until SIGINT or SIGTERM, then prints its ledger
// checked per reference: the oracle a -target run in another process cannot see.
func serve(o options, stdout, stderr io.Writer) int {
	ln, err := net.Listen("tcp", o.serve)
	if err != nil {
		fmt.Fprintln(stderr, "payments:", err)
		return 2
	}
	h := idemtest.NewHandler(serverConfig(o))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM) // before the banner: a stop right after it is caught
	defer signal.Stop(sig)
	dialect := ""
	if o.dialect != "" && o.dialect != idemtest.DialectIdem {
		dialect = ", dialect " + o.dialect
	}
	fmt.Fprintf(stdout, "serving the payments API on http://%s (fault rate %.2f, seed %d%s); stop with Ctrl-C\n",
		ln.Addr(), o.faultRate, o.seed, dialect)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case <-sig:
	case err := <-done:
		fmt.Fprintln(stderr, "payments:", err)
		return 1
	}
	h.Close() // end slow requests now, so shutdown does not wait for them
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "payments: shutdown:", err)
	}
	byRef := map[string]int{}
	for _, e := range h.Executions() {
		if e.Canceled { // adyen's cancel by reference: counted net of cancels
			continue
		}
		byRef[e.Reference]++
	}
	dups := 0
	for ref, n := range byRef {
		if n > 1 {
			dups++
			fmt.Fprintf(stdout, "DUPLICATE %s: charged %d times\n", ref, n) // net of cancels
		}
	}
	fmt.Fprintf(stdout, "server: %s\nledger: %d references charged, duplicates per reference %d\n", h.Stats(), len(byRef), dups)
	if dups > 0 {
		return 1
	}
	return 0
}
