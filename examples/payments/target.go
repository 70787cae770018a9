package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/outcome"
)

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
// Under a dialect other than idem (api.Dialect) there is no status endpoint: the records'
// own word stands per key, and the oracle per business payment is the profile's search by
// reference, if it has one (asked once its lag has passed since the run's last send).
//
// When the API offers the search by reference (lookupPath), it is the oracle per business
// payment: more than one charge with the reference is a duplicate, whatever the keys; a
// charge idem does not record as succeeded (except under a key waiting for reconciliation)
// is lost, and so is a recorded payment id the search does not list. Keys that ended in a
// stored 5xx are not asked about: the status endpoint can only say "completed 500".
func checkTarget(ctx context.Context, payments []payment, recs []*keystore.Record, seen map[int]map[string]bool, baseURL string, api apiSpec) verdict {
	var v verdict
	groups := byPayment(recs)
	lookupPath, lag := api.oracleSearch()
	sc := &statusClient{base: strings.TrimRight(baseURL, "/"), path: api.oracleStatus(), search: lookupPath}
	if lag > 0 {
		time.Sleep(lag) // a charge made by the last send may not show in the search before
	}
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
			if sc.path == "" { // no status endpoint: the record's word
				if r.State == keystore.StateSucceeded {
					completed++
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
			ok2xx := err == nil && st.State == outcome.KeyStatusCompleted && st.ResponseStatusCode/100 == 2
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
		why = v.settlePending(p.ref(), last, why, "")
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

func (c *statusClient) ask(ctx context.Context, key string, tries int) (outcome.KeyStatus, error) {
	if c.http.Timeout == 0 {
		c.http.Timeout = 10 * time.Second // a black-holed API must not hold the report for minutes
	}
	if c.down {
		tries = 1
	}
	target := c.base + strings.ReplaceAll(c.path, "{key}", url.PathEscape(key))
	req, err := newGet(ctx, target)
	if err != nil {
		return outcome.KeyStatus{}, err
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
		st := outcome.DecodeKeyStatus(resp.StatusCode, resp.Header, body, time.Now())
		if st.State != outcome.KeyStatusUnknown && st.State != outcome.KeyStatusProcessing {
			return st, nil
		}
		last = fmt.Errorf("HTTP %d, state %s", resp.StatusCode, st.State)
	}
	if transportOnly && tries > 1 {
		c.down = true
	}
	return outcome.KeyStatus{}, last
}
