package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// maxTries bounds the business-level tries of one payment. A try is one intent with its own
// idempotency key; a new try is made only after the previous key was settled as not
// executed (the server stored a 5xx for it, and the search by reference found no charge:
// idem.ErrNotExecuted). A stored 5xx whose charge the search finds is a success, never a
// new try.
const maxTries = 5

// payment is one payment of the workload, identical in every process that generates it.
type payment struct {
	Run      string // the run's tag in the reference ("" or "3f9a1c-"), see -run-id
	Index    int
	Amount   int64 // minor units; 0 on purpose for the invalid ones
	Currency string
	Customer string
	Invalid  bool
}

// ref is the payment's reference, sent in the body: the ledger is searched by it.
func (p payment) ref() string { return "pay-" + p.Run + strconv.Itoa(p.Index) }

// tagRun puts the run's tag (-run-id) in every payment's reference.
func tagRun(ps []payment, runID string) {
	if runID == "" {
		return
	}
	for i := range ps {
		ps[i].Run = runID + "-"
	}
}

// body is the request body. Built from the payment alone, so every retry, in every process,
// sends byte-identical bytes (a different body under the same key is a key conflict).
func (p payment) body() []byte {
	b, err := json.Marshal(struct {
		Amount    int64  `json:"amount"`
		Currency  string `json:"currency"`
		Customer  string `json:"customer"`
		Reference string `json:"reference"`
	}{p.Amount, p.Currency, p.Customer, p.ref()})
	if err != nil {
		panic(err) // plain strings and ints always encode
	}
	return b
}

// generate returns n payments drawn from seed. About 2% (at least one) are invalid on
// purpose, with amount 0, to show a 4xx failing at once.
func generate(n int, seed int64) []payment {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9a7))
	currencies := []string{"EUR", "USD", "GBP"}
	ps := make([]payment, n)
	for i := range ps {
		ps[i] = payment{
			Index:    i,
			Amount:   100 + rng.Int64N(50_000),
			Currency: currencies[rng.IntN(len(currencies))],
			Customer: "cus_" + strconv.Itoa(1+rng.IntN(200)),
		}
	}
	if n > 0 {
		for _, i := range rng.Perm(n)[:max(1, n/50)] {
			ps[i].Invalid, ps[i].Amount = true, 0
		}
	}
	return ps
}

// intentName names try t (1-based) of payment i: "pay-7" for the first, "pay-7#2" after.
// Deterministic, so a restarted process finds the keys its predecessor persisted.
func intentName(i, try int) string {
	if try <= 1 {
		return "pay-" + strconv.Itoa(i)
	}
	return fmt.Sprintf("pay-%d#%d", i, try)
}

// parseIntent is the inverse of intentName.
func parseIntent(intent string) (index, try int, ok bool) {
	rest, found := strings.CutPrefix(intent, "pay-")
	if !found {
		return 0, 0, false
	}
	try = 1
	if i, t, hasTry := strings.Cut(rest, "#"); hasTry {
		n, err := strconv.Atoi(t)
		if err != nil || n < 2 {
			return 0, 0, false
		}
		rest, try = i, n
	}
	index, err := strconv.Atoi(rest)
	if err != nil || index < 0 {
		return 0, 0, false
	}
	return index, try, true
}
