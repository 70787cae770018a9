package probe_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/probe"
)

// An API that answers 101 Switching Protocols and then says nothing: the probe never reads
// that body (the raw connection, which no context or timeout ends) and returns.
func TestSwitchingProtocolsAnswerIsNotRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				_, _ = c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n"))
				<-done
			}()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		_, err := probe.Run(ctx, probe.Config{BaseURL: "http://" + ln.Addr().String(), Sandbox: true})
		ran <- err
	}()
	select {
	case <-ran: // whatever the verdict, it returned
	case <-time.After(20 * time.Second): // a hang, not a timing bound
		t.Fatal("probe.Run blocked on a 101 answer's body")
	}
}
