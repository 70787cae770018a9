package idemserver_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/idemserver"
)

// The middleware in front of a payments handler with any router, and its status endpoint.
func Example() {
	mw, err := idemserver.New(idemserver.Config{
		Backend: idemserver.NewMemory(), // pgserver.New(pool) in production
		// The tenant comes from verified credentials, never from a client-chosen header.
		Tenant: func(r *http.Request) (string, error) {
			if r.Header.Get("Authorization") != "Bearer sk_test_acct_1" {
				return "", errors.New("unauthenticated")
			}
			return "acct_1", nil
		},
	})
	if err != nil {
		panic(err)
	}
	charges := 0
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"amount"`) {
			_ = idemserver.NotExecuted(r) // a validation answer: not stored, the key stays usable
			http.Error(w, `{"error":"amount required"}`, http.StatusBadRequest)
			return
		}
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, charges)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Handler(pay))
	mux.Handle("GET /v1/payments/operations/{key}", mw.KeyStatusHandler("POST /v1/payments", nil))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	send := func(method, path, body string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test_acct_1")
		req.Header.Set("Idempotency-Key", "order-4711")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
	}
	send("POST", "/v1/payments", `{}`)                 // validation failure, not stored
	send("POST", "/v1/payments", `{"amount":1999}`)    // executes
	send("POST", "/v1/payments", `{ "amount": 1999 }`) // same JSON: replayed
	send("GET", "/v1/payments/operations/order-4711", "")
	fmt.Println("charges:", charges)
	// Output:
	// 400  {"error":"amount required"}
	// 201  {"id":"ch_1"}
	// 201 true {"id":"ch_1"}
	// 200  {"status":"completed","response_status":201,"response_body":{"id":"ch_1"}}
	// charges: 1
}
