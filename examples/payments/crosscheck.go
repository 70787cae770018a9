package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keystore"
)

// verdict is the cross-check of every payment: idem's records on disk against the server's
// ledger (embedded) or against what the API's status endpoint and responses say (-target).
//
// A payment is in exactly one of Succeeded, Failed, Pending and NotExecuted, by its last
// try's record. Pending payments have no final state and an outcome that may have executed:
// they are lost. NotExecuted payments are pending too, but the client knows the API never
// executed their key (keystore.Record.NotExecuted), and the oracle does not contradict it:
// not lost, the same key is resent safely later, but the run did not finish them.
//
// A payment whose last record is manual (a stored 5xx that no lookup settled) needs
// reconciliation: neither lost nor finished, and never paid again blindly.
type verdict struct {
	Succeeded, Failed, Pending int
	ExecutedOnce               int
	NewIntents                 int      // extra intents (new keys) after a key settled as not executed
	StoredErrors               int      // keys that ended in a stored 5xx
	ReconciledByLookup         int      // of those, settled by the search by reference
	NeedsReconciliation        int      // payments whose last key is manual: a person must decide
	Canceled                   int      // charges a cancel by reference undid (embedded ledger)
	UnknownPending             int      // of NeedsReconciliation: left pending with an unknown outcome
	Unsettled                  []string // the payments needing reconciliation, one line each
	Duplicates                 []string // "pay-7: executed 2 times"
	Lost                       []string // "pay-9: recorded succeeded, never executed"
	NotExecuted                []string // "pay-3: key K never executed (budget_exhausted)"
	Unanswered                 int      // of NotExecuted: the API never answered the key at all
}

// finalState opens the keystore after the last child, reconciles anything still pending
// (a last Recover, as an operator would; at least one, for the manual records a lookup may
// settle now), pays under a new intent what the lookup found never charged, as the children
// do, and returns every record, with what it did.
func finalState(ctx context.Context, spec storeSpec, payments []payment, baseURL string, api apiSpec, concurrency int) ([]*keystore.Record, idem.Stats, idem.RecoverReport, error) {
	var total idem.RecoverReport
	store, closeStore, err := spec.open(ctx)
	if err != nil {
		return nil, idem.Stats{}, total, err
	}
	defer closeStore()
	client, err := newClient(baseURL, api, store, concurrency, spec.fleet())
	if err != nil {
		return nil, idem.Stats{}, total, err
	}
	defer client.Close()
	// A fleet's dead sender may still hold leases for up to fleetLeaseTTL: keep going until
	// they have expired and Recover took the records over.
	rounds := 5
	if spec.fleet() {
		rounds = 5 + int(2*fleetLeaseTTL/(200*time.Millisecond))
	}
	counted := map[string]bool{}
	for round := 0; round < rounds; round++ {
		pending, err := store.List(ctx, keystore.StatePending)
		if err != nil {
			break
		}
		if len(pending) == 0 {
			if round == 0 { // still one pass: it asks the lookup about manual records (a stored 5xx)
				if _, err := client.Recover(ctx, nil); err != nil {
					return nil, client.Stats(), total, err
				}
			}
			break
		}
		if round > 0 && allUnanswered(pending) {
			break // the last round got no answer for any of them: the API is unreachable
		}
		for _, r := range pending { // later rounds find the same records again: count each once
			if !counted[r.Key] {
				counted[r.Key] = true
				total.Pending++
			}
		}
		rep, err := client.Recover(ctx, nil)
		if err != nil {
			return nil, client.Stats(), total, err
		}
		total.Succeeded += rep.Succeeded
		total.Failed += rep.Failed
		total.Manual += rep.Manual
		time.Sleep(200 * time.Millisecond) // a slow request may still hold its key
	}
	recs, err := store.List(ctx)
	if err != nil {
		return nil, client.Stats(), total, err
	}
	// A stored 5xx that this reconciliation settled as not executed (the lookup found no
	// charge) left its payment unpaid: the children would have paid it under a new intent,
	// and so does this one, as any application must. Without it the run counted a valid
	// payment never made among the 4xx failures, and exited 0 (adversarial run).
	if unpaid := unpaidAfterLookup(payments, recs); len(unpaid) > 0 {
		s := &sender{client: client, em: &emitter{w: io.Discard}}
		for _, p := range unpaid {
			s.pay(ctx, p)
		}
		if recs, err = store.List(ctx); err != nil {
			return nil, client.Stats(), total, err
		}
	}
	return recs, client.Stats(), total, nil
}

// unpaidAfterLookup returns the valid payments whose last intent the lookup settled as not
// executed, with tries left for a new intent.
func unpaidAfterLookup(payments []payment, recs []*keystore.Record) []payment {
	var out []payment
	groups := byPayment(recs)
	for _, p := range payments {
		rs := groups[p.Index]
		if p.Invalid || len(rs) == 0 || len(rs) >= maxTries {
			continue
		}
		if last := rs[len(rs)-1]; last.State == keystore.StateFailed && last.Reason == keystore.ReasonNotExecuted {
			out = append(out, p)
		}
	}
	return out
}

// allUnanswered reports whether every record is known not executed and the API never
// answered its key: waiting and asking again cannot help.
func allUnanswered(recs []*keystore.Record) bool {
	for _, r := range recs {
		if !unanswered(r) {
			return false
		}
	}
	return true
}

// notExecuted reports a pending record the client knows the API never executed.
func notExecuted(r *keystore.Record) bool {
	return r != nil && r.State == keystore.StatePending && r.NotExecuted
}

// unanswered reports a record known not executed whose key never got any HTTP answer.
func unanswered(r *keystore.Record) bool { return notExecuted(r) && r.LastStatusCode == 0 }

// byPayment groups records by payment index, ordered by try; the last try is the payment's
// state. Records of other intents are ignored.
func byPayment(recs []*keystore.Record) map[int][]*keystore.Record {
	out := map[int][]*keystore.Record{}
	tries := map[*keystore.Record]int{}
	for _, r := range recs {
		if i, try, ok := parseIntent(r.Intent); ok {
			out[i] = append(out[i], r)
			tries[r] = try
		}
	}
	for _, rs := range out {
		slices.SortFunc(rs, func(a, b *keystore.Record) int { return tries[a] - tries[b] })
	}
	return out
}

// tallyStates counts a payment whose last try ended succeeded or failed, and returns that
// last record (nil if there is none). The caller settles the others with settlePending.
func (v *verdict) tallyStates(rs []*keystore.Record) *keystore.Record {
	if len(rs) == 0 {
		return nil
	}
	last := rs[len(rs)-1]
	v.NewIntents += len(rs) - 1
	for _, r := range rs {
		if storedError(r) {
			v.StoredErrors++
			if settledByRoute(r.Note) {
				v.ReconciledByLookup++
			}
		}
	}
	switch last.State {
	case keystore.StateSucceeded:
		v.Succeeded++
	case keystore.StateFailed:
		v.Failed++
	case keystore.StateManual:
		v.NeedsReconciliation++
	}
	return last
}

// invalidNote explains a pending payment the demo made invalid on purpose (amount 0): its
// first attempt's outcome was unknown, and the refusal of its resend (a 4xx that is not the
// key's stored answer) says nothing of that attempt, so idem keeps it pending.
func invalidNote(r *keystore.Record) string {
	var b struct {
		Amount *int64 `json:"amount"`
	}
	if json.Unmarshal(r.Request.Body, &b) != nil || b.Amount == nil || *b.Amount != 0 {
		return ""
	}
	return "; invalid on purpose (amount 0): an attempt's outcome was unknown and the refusal of the resend says nothing of it"
}

// storedError reports a key that ended in a 5xx the server stored, settled or not.
func storedError(r *keystore.Record) bool {
	switch r.Reason {
	case keystore.ReasonStoredServerError:
		return true
	case keystore.ReasonExecuted, keystore.ReasonNotExecuted:
		return r.LastStatusCode >= 500
	}
	return false
}

// settlePending files a payment whose last record is not final, after the oracle had its
// say (why: its reasons to call the payment lost so far; ledger: what the oracle shows of
// the reference, appended to the details). A record known not executed, and not
// contradicted, is not executed. A manual record, or a pending one whose outcome stayed
// unknown (no settling route could tell), with nothing else against it, needs
// reconciliation: the application was never told it succeeded, and it was never paid again
// blindly; a person (or a webhook) settles it. A payment without any record is lost. It
// returns the reasons the payment is lost, if any.
func (v *verdict) settlePending(ref string, last *keystore.Record, why []string, ledger string) []string {
	if last != nil && last.State == keystore.StateManual {
		v.Unsettled = append(v.Unsettled, fmt.Sprintf("%s: key %s manual (%s)%s", ref, last.Key, last.Reason, ledger))
	}
	if last != nil && (last.State.Terminal() || last.State == keystore.StateManual) {
		return why
	}
	if notExecuted(last) && len(why) == 0 {
		reason := last.Reason
		if reason == "" {
			reason = "not sent"
		}
		v.NotExecuted = append(v.NotExecuted, fmt.Sprintf("%s: key %s never executed (%s)", ref, last.Key, reason))
		if unanswered(last) {
			v.Unanswered++
		}
		return nil
	}
	v.Pending++
	if last != nil && !notExecuted(last) && len(why) == 0 {
		v.NeedsReconciliation++
		v.UnknownPending++
		v.Unsettled = append(v.Unsettled, fmt.Sprintf("%s: key %s pending, outcome unknown (%s)%s%s", ref, last.Key, last.Reason, ledger, invalidNote(last)))
		return nil
	}
	var state keystore.State
	if last != nil {
		state = last.State
	}
	what := fmt.Sprintf("no final state (%q)", state)
	if notExecuted(last) {
		what += ", recorded as never executed"
	}
	return append([]string{what}, why...)
}

// checkLedger judges every payment against the server's ledger, the oracle, counting charges
// per reference net of cancels (the adyen dialect's cancel by reference undoes a charge
// whose outcome was unknown, after which the payment is made again under a new intent):
//   - duplicate: the ledger holds more than one charge of the payment not canceled;
//   - lost: idem recorded a key succeeded and the ledger never executed it, executed it
//     under another payment id or canceled it; a payment recorded succeeded has no charge
//     left; the payment has no record; or the ledger holds a charge, not canceled, under a
//     key that idem does not record as succeeded (or manual, or pending with an unknown
//     outcome: waiting for a person, see settlePending).
func checkLedger(payments []payment, recs []*keystore.Record, srv *idemtest.Server) verdict {
	var v verdict
	groups := byPayment(recs)
	execByKey := map[string][]idemtest.Execution{}
	for _, e := range srv.Executions() {
		execByKey[e.Key] = append(execByKey[e.Key], e)
		if e.Canceled {
			v.Canceled++
		}
	}
	lost := map[string][]string{} // reference -> reasons
	succeededKeys := map[string]bool{}
	// A stored 5xx nobody settled (manual), or an unknown outcome no route could settle
	// (pending, not known unexecuted): the charge, if any, waits for a person.
	manualKeys := map[string]bool{}
	for _, r := range recs {
		if r.State == keystore.StateManual || (r.State == keystore.StatePending && !r.NotExecuted) {
			manualKeys[r.Key] = true
		}
	}
	lastOf := map[string]*keystore.Record{}
	for _, p := range payments {
		rs := groups[p.Index]
		lastOf[p.ref()] = v.tallyStates(rs)
		charged, canceled := srv.ChargesByReference(p.ref())
		net := charged - canceled
		switch {
		case net == 1:
			v.ExecutedOnce++
		case net > 1 && canceled == 0:
			v.Duplicates = append(v.Duplicates, fmt.Sprintf("%s: executed %d times", p.ref(), net))
		case net > 1:
			v.Duplicates = append(v.Duplicates, fmt.Sprintf("%s: executed %d times net of cancels (%d charges, %d canceled)", p.ref(), net, charged, canceled))
		}
		told := false // the application was told the payment succeeded
		for _, r := range rs {
			if r.State != keystore.StateSucceeded {
				continue
			}
			told = true
			succeededKeys[r.Key] = true
			switch ex := execByKey[r.Key]; {
			case len(ex) == 0:
				lost[p.ref()] = append(lost[p.ref()], fmt.Sprintf("key %s recorded succeeded, never executed", r.Key))
			case recordID(r) != ex[0].ID:
				lost[p.ref()] = append(lost[p.ref()], fmt.Sprintf("key %s recorded as %q, the ledger executed %s", r.Key, recordID(r), ex[0].ID))
			case ex[0].Canceled:
				lost[p.ref()] = append(lost[p.ref()], fmt.Sprintf("key %s recorded succeeded as %s, the charge was canceled", r.Key, ex[0].ID))
			}
		}
		if told && net == 0 && len(lost[p.ref()]) == 0 {
			lost[p.ref()] = append(lost[p.ref()], fmt.Sprintf("recorded succeeded, %d charges of which %d canceled: none left", charged, canceled))
		}
	}
	// Every charge not canceled must belong to a key idem records as succeeded (or manual).
	for key, ex := range execByKey {
		if succeededKeys[key] || manualKeys[key] {
			continue
		}
		for _, e := range ex {
			if !e.Canceled {
				lost[e.Reference] = append(lost[e.Reference], fmt.Sprintf("key %s executed as %s, not recorded as succeeded", key, e.ID))
				break
			}
		}
	}
	// Only now is every execution known: a record claiming nothing was executed is believed
	// only if the ledger agrees.
	for _, p := range payments {
		charged, canceled := srv.ChargesByReference(p.ref())
		ledger := fmt.Sprintf(" (ledger: %d charges, %d canceled)", charged, canceled)
		if why := v.settlePending(p.ref(), lastOf[p.ref()], lost[p.ref()], ledger); len(why) > 0 {
			lost[p.ref()] = why
		}
	}
	for ref, why := range lost {
		charged, canceled := srv.ChargesByReference(ref)
		v.Lost = append(v.Lost, fmt.Sprintf("%s: %s (ledger: %d charges, %d canceled)", ref, strings.Join(why, "; "), charged, canceled))
	}
	slices.Sort(v.Lost)
	return v
}

// recordID is the payment id in a record's stored answer, "" if none.
func recordID(r *keystore.Record) string {
	if r.Response == nil {
		return ""
	}
	return paymentID(r.Response.Body)
}
