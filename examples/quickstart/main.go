// Command quickstart is docs/CLIENT.md's Quick start as a program: the page quotes quickstart.go
// whole, and the test checks that it still does, byte for byte, and runs it against idemtest.
//
//	go run ./examples/quickstart -api https://api.example.com -db idem.db   # API key from $API_KEY
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
)

func main() {
	api := flag.String("api", "", "the payments API's base `URL` (required)")
	db := flag.String("db", "idem.db", "keystore file `path`")
	flag.Parse()
	if *api == "" {
		fmt.Fprintln(os.Stderr, "quickstart: -api URL is required")
		os.Exit(2)
	}
	next, err := pay(context.Background(), *api, *db, os.Getenv("API_KEY"))
	fmt.Println("next:", next)
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}
