package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -serve runs the API until SIGINT, then prints its ledger per reference: a reference charged
// under two keys is a duplicate, and the exit status says so.
func TestServePrintsLedgerPerReference(t *testing.T) {
	pr, pw := io.Pipe()
	var out bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- serve(options{serve: "127.0.0.1:0", seed: 1}, pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	require.True(t, sc.Scan())
	banner := sc.Text()
	_, rest, ok := strings.Cut(banner, "on http://")
	require.True(t, ok, banner)
	base := "http://" + strings.Fields(rest)[0]

	pay := func(key, ref string) int {
		body := `{"amount":100,"currency":"EUR","customer":"cus_1","reference":"` + ref + `"}`
		req, err := http.NewRequest(http.MethodPost, base+paymentsPath, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusCreated, pay("k1", "order-1"))
	assert.Equal(t, http.StatusCreated, pay("k2", "order-1")) // a second key, the same business payment
	assert.Equal(t, http.StatusCreated, pay("k3", "order-2"))
	resp, err := http.Get(base + "/v1/payments?reference=order-1")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGINT))
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&out, pr); close(copied) }()
	select {
	case c := <-code:
		assert.Equal(t, 1, c)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop on SIGINT")
	}
	<-copied // serve returned and the pipe is closed: everything it wrote is in out
	text := out.String()
	assert.Contains(t, text, "DUPLICATE order-1: charged 2 times")
	assert.Contains(t, text, "ledger: 2 references charged, duplicates per reference 1")
	assert.Contains(t, text, "executions=3")
}
