package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
	Duplicates                 []string // "pay-7: executed 2 times"
	Lost                       []string // "pay-9: recorded succeeded, never executed"
	NotExecuted                []string // "pay-3: key K never executed (budget_exhausted)"
	Unanswered                 int      // of NotExecuted: the API never answered the key at all
}

// finalState opens the keystore after the last child, reconciles anything still pending
// (a last Recover, as an operator would; at least one, for the manual records a lookup may
// settle now), pays under a new intent what the lookup found never charged, as the children
// do, and returns every record, with what it did.
func finalState(ctx context.Context, spec storeSpec, payments []payment, baseURL, statusPath, lookupPath string, concurrency int) ([]*keystore.Record, idem.Stats, idem.RecoverReport, error) {
	var total idem.RecoverReport
	store, closeStore, err := spec.open(ctx)
	if err != nil {
		return nil, idem.Stats{}, total, err
	}
	defer closeStore()
	client, err := newClient(baseURL, statusPath, lookupPath, store, concurrency, spec.fleet())
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
		if last := rs[len(rs)-1]; last.State == keystore.StateFailed && last.Reason == idem.ReasonNotExecuted {
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
			if strings.HasPrefix(r.Note, "lookup:") {
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

// storedError reports a key that ended in a 5xx the server stored, settled or not.
func storedError(r *keystore.Record) bool {
	switch r.Reason {
	case idem.ReasonStoredServerError:
		return true
	case idem.ReasonExecuted, idem.ReasonNotExecuted:
		return r.LastStatusCode >= 500
	}
	return false
}

// settlePending files a payment whose last record is not final, after the oracle had its
// say (why: its reasons to call the payment lost so far). A record known not executed, and
// not contradicted, is not executed; anything else without a final state is pending, and
// lost. It returns the reasons the payment is lost, if any.
func (v *verdict) settlePending(ref string, last *keystore.Record, why []string) []string {
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

// checkLedger judges every payment against the server's ledger, the oracle:
//   - duplicate: the ledger executed the payment more than once;
//   - lost: idem recorded a key succeeded and the ledger never executed it (or executed it
//     under another payment id), the payment has no final state, or the ledger executed a
//     key that idem does not record as succeeded.
func checkLedger(payments []payment, recs []*keystore.Record, srv *idemtest.Server) verdict {
	var v verdict
	groups := byPayment(recs)
	execByKey := map[string][]idemtest.Execution{}
	for _, e := range srv.Executions() {
		execByKey[e.Key] = append(execByKey[e.Key], e)
	}
	lost := map[string][]string{} // reference -> reasons
	succeededKeys := map[string]bool{}
	manualKeys := map[string]bool{} // a stored 5xx nobody settled: the charge, if any, waits for a person
	for _, r := range recs {
		if r.State == keystore.StateManual {
			manualKeys[r.Key] = true
		}
	}
	lastOf := map[string]*keystore.Record{}
	for _, p := range payments {
		rs := groups[p.Index]
		lastOf[p.ref()] = v.tallyStates(rs)
		switch n := srv.ExecutionsByReference(p.ref()); {
		case n == 1:
			v.ExecutedOnce++
		case n > 1:
			v.Duplicates = append(v.Duplicates, fmt.Sprintf("%s: executed %d times", p.ref(), n))
		}
		for _, r := range rs {
			if r.State != keystore.StateSucceeded {
				continue
			}
			succeededKeys[r.Key] = true
			switch ex := execByKey[r.Key]; {
			case len(ex) == 0:
				lost[p.ref()] = append(lost[p.ref()], fmt.Sprintf("key %s recorded succeeded, never executed", r.Key))
			case recordID(r) != ex[0].ID:
				lost[p.ref()] = append(lost[p.ref()], fmt.Sprintf("key %s recorded as %q, the ledger executed %s", r.Key, recordID(r), ex[0].ID))
			}
		}
	}
	// Every execution must belong to a key idem records as succeeded.
	for key, ex := range execByKey {
		if !succeededKeys[key] && !manualKeys[key] {
			ref := ex[0].Reference
			lost[ref] = append(lost[ref], fmt.Sprintf("key %s executed as %s, not recorded as succeeded", key, ex[0].ID))
		}
	}
	// Only now is every execution known: a record claiming nothing was executed is believed
	// only if the ledger agrees.
	for _, p := range payments {
		if why := v.settlePending(p.ref(), lastOf[p.ref()], lost[p.ref()]); len(why) > 0 {
			lost[p.ref()] = why
		}
	}
	for ref, why := range lost {
		v.Lost = append(v.Lost, ref+": "+strings.Join(why, "; "))
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

// checkTarget judges every payment without a ledger, from what the API itself says: the
// status endpoint asked for every persisted key, the payment ids in the records, and the ids
// the children saw in responses.
//   - duplicate: more than one payment id, or more than one key completed with a 2xx;
//   - lost: a key recorded succeeded the API does not report completed with a 2xx, a key
//     the API completed with a 2xx that idem does not record as succeeded, or no final state
//     (except a record known never executed, which the API does not report completed).
//
// A record known never executed is asked about once, without retries, and a failed ask
// proves nothing about it: against an unreachable API every key is such a record, and
// retrying each one would only add seconds per payment to the report.
//
// When the API offers the search by reference (lookupPath), it is the oracle per business
// payment: more than one charge with the reference is a duplicate, whatever the keys; a
// charge idem does not record as succeeded (except under a key waiting for reconciliation)
// is lost, and so is a recorded payment id the search does not list. Keys that ended in a
// stored 5xx are not asked about: the status endpoint can only say "completed 500".
func checkTarget(ctx context.Context, payments []payment, recs []*keystore.Record, seen map[int]map[string]bool, baseURL, statusPath, lookupPath string) verdict {
	var v verdict
	groups := byPayment(recs)
	sc := &statusClient{base: strings.TrimRight(baseURL, "/"), path: statusPath, search: lookupPath}
	for _, p := range payments {
		rs := groups[p.Index]
		last := v.tallyStates(rs)
		ids := map[string]bool{}
		for id := range seen[p.Index] {
			ids[id] = true
		}
		completed := 0
		var why []string
		for _, r := range rs {
			if storedError(r) {
				if r.State == keystore.StateSucceeded {
					ids[recordID(r)] = true
				}
				continue
			}
			tries := statusTries
			if notExecuted(r) {
				tries = 1
			}
			st, err := sc.ask(ctx, r.Key, tries)
			if err != nil && notExecuted(r) {
				continue
			}
			ok2xx := err == nil && st.State == idem.KeyStatusCompleted && st.ResponseStatusCode/100 == 2
			if ok2xx {
				completed++
				ids[paymentID(st.ResponseBody)] = true
			}
			if r.State == keystore.StateSucceeded {
				ids[recordID(r)] = true
			}
			switch {
			case err != nil:
				why = append(why, fmt.Sprintf("key %s: status endpoint: %v", r.Key, err))
			case r.State == keystore.StateSucceeded && !ok2xx:
				why = append(why, fmt.Sprintf("key %s recorded succeeded, API says %s", r.Key, st.State))
			case r.State != keystore.StateSucceeded && ok2xx:
				why = append(why, fmt.Sprintf("key %s completed by the API, recorded %s", r.Key, r.State))
			}
		}
		why = v.settlePending(p.ref(), last, why)
		delete(ids, "")
		charges, searchErr := sc.searchRef(ctx, p.ref())
		switch {
		case searchErr == nil:
			found := map[string]bool{}
			for _, id := range charges {
				found[id] = true
			}
			if len(charges) == 1 {
				v.ExecutedOnce++
			}
			if len(charges) > 1 {
				v.Duplicates = append(v.Duplicates, fmt.Sprintf("%s: charged %d times (search by reference: %s)",
					p.ref(), len(charges), strings.Join(charges, ", ")))
			}
			for id := range ids {
				if !found[id] {
					why = append(why, fmt.Sprintf("payment id %s not listed by the search by reference", id))
				}
			}
			if len(charges) > 0 && last != nil && last.State != keystore.StateSucceeded && last.State != keystore.StateManual {
				why = append(why, fmt.Sprintf("charged as %s, recorded %s", charges[0], last.State))
			}
		case lookupPath != "" && !errors.Is(searchErr, errNoSearch) && !allNotExecuted(rs):
			// A payment the API never executed needs no search; any other does.
			why = append(why, fmt.Sprintf("search by reference: %v", searchErr))
		default: // no search endpoint: the status endpoint's word per key
			if completed == 1 && len(ids) == 1 {
				v.ExecutedOnce++
			}
		}
		if len(ids) > 1 || completed > 1 {
			v.Duplicates = append(v.Duplicates, fmt.Sprintf("%s: %d payment ids, %d keys completed", p.ref(), len(ids), completed))
		}
		if len(why) > 0 {
			v.Lost = append(v.Lost, p.ref()+": "+strings.Join(why, "; "))
		}
	}
	return v
}

// statusTries bounds the asks about one key while the answers are unusable.
const statusTries = 10

// statusClient asks the status endpoint in the default convention, retrying answers it
// cannot use (a 503 or a transport error) a few times. Once a key got only transport errors
// in all its tries, the endpoint is taken as down and later keys get one try each, so an
// unreachable API costs one refused connection per key, not seconds.
type statusClient struct {
	base, path string
	search     string // the search by reference path, "" if the API has none
	http       http.Client
	down       bool
	noSearch   bool // the API answered 400, 404, 405 or 501 to a search: it has none
}

// newGet builds the authorised GET the oracle sends, once for all its tries (a GET without
// a body may be sent again).
func newGet(ctx context.Context, target string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// fetch sends req once and reads up to 4 MiB of the answer. resp is nil when no answer came
// (a transport error); err is set then, or when the body could not be read.
func (c *statusClient) fetch(req *http.Request) (resp *http.Response, body []byte, err error) {
	resp, err = c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp, body, err
}

func (c *statusClient) ask(ctx context.Context, key string, tries int) (idem.KeyStatus, error) {
	if c.http.Timeout == 0 {
		c.http.Timeout = 10 * time.Second // a black-holed API must not hold the report for minutes
	}
	if c.down {
		tries = 1
	}
	target := c.base + strings.ReplaceAll(c.path, "{key}", url.PathEscape(key))
	req, err := newGet(ctx, target)
	if err != nil {
		return idem.KeyStatus{}, err
	}
	var last error
	transportOnly := true
	for try := 0; try < tries; try++ {
		if try > 0 {
			time.Sleep(time.Duration(try) * 50 * time.Millisecond)
		}
		resp, body, err := c.fetch(req)
		if resp != nil {
			transportOnly = false
		}
		if err != nil {
			last = err
			continue
		}
		st := idem.DecodeKeyStatus(resp.StatusCode, resp.Header, body, time.Now())
		if st.State != idem.KeyStatusUnknown && st.State != idem.KeyStatusProcessing {
			return st, nil
		}
		last = fmt.Errorf("HTTP %d, state %s", resp.StatusCode, st.State)
	}
	if transportOnly && tries > 1 {
		c.down = true
	}
	return idem.KeyStatus{}, last
}
