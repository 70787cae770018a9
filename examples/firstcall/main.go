// Command firstcall is the client README.md shows: one payment, made safe to retry.
//
//	API_URL=http://127.0.0.1:8080 go run ./examples/firstcall
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore/boltstore"
)

func main() {
	store, err := boltstore.Open("idem.db", nil) // the keys of unfinished payments survive a crash
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	c, err := idem.NewClient(idem.Config{
		BaseURL:      os.Getenv("API_URL"),
		Store:        store,
		KeyStatusURL: "/v1/payments/operations/{key}", // asked before any resend after a lost answer
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	body := []byte(`{"amount":1250,"currency":"EUR","customer":"cus_42","reference":"order-42"}`)
	op := idem.NewOperation(http.MethodPost, "/v1/payments", body, idem.WithIntent("order-42"))
	res, err := c.Do(context.Background(), op) // retries, same key, same bytes
	if err != nil {
		log.Fatal(err) // errors.Is(err, idem.ErrOutcomeUnknown): maybe paid; run again, never pay anew
	}
	fmt.Println(res.StatusCode, string(res.Body), "from", res.Source) // run again: the same answer, "from store" (idem.db)
}
