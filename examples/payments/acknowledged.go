package main

import (
	"fmt"
	"slices"

	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// checkAcknowledged judges what the senders told their callers: every payment a sender
// acknowledged (Do returned a payment id) must have been charged exactly once in the
// server's ledger, net of cancels (adyen's cancel by reference), under that id. With several senders offering the same payment, each may
// acknowledge it; all must name the one charge. It returns one line per violation.
func checkAcknowledged(ids map[int]map[string]bool, srv *idemtest.Server) []string {
	byRef := map[string][]idemtest.Execution{}
	for _, e := range srv.Executions() {
		if e.Canceled { // undone by a cancel by reference: not a charge
			continue
		}
		byRef[e.Reference] = append(byRef[e.Reference], e)
	}
	var bad []string
	for i, seen := range ids {
		ref := payment{Index: i}.ref()
		ex := byRef[ref]
		if len(ex) != 1 {
			bad = append(bad, fmt.Sprintf("%s: acknowledged, charged %d times", ref, len(ex)))
			continue
		}
		for id := range seen {
			if id != ex[0].ID {
				bad = append(bad, fmt.Sprintf("%s: acknowledged as %s, the ledger charged %s", ref, id, ex[0].ID))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// notFinal counts the records left pending at the end: every record must end succeeded,
// failed, or manual (waiting for a person), whatever its try.
func notFinal(recs []*keystore.Record) int {
	n := 0
	for _, r := range recs {
		if r.State == keystore.StatePending {
			n++
		}
	}
	return n
}
