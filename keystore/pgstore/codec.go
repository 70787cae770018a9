package pgstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/keystore"
)

// columns is the column list every read selects, in the order scanRecord expects.
const columns = `tenant, key, intent, fingerprint, method, url, request_header, request_body,
	state, attempts, last_status, reason, not_executed, error,
	response_status, response_header, response_body, created_ns, updated_ns,
	owner, lease_until_ns, fence, note`

// qualified is columns prefixed with the table alias r, for statements that join.
var qualified = "r." + strings.Join(strings.Split(strings.Join(strings.Fields(columns), " "), ", "), ", r.")

// row is a record as the columns hold it.
type row struct {
	tenant, key, intent      []byte
	fingerprint, method, url string
	reqHeader, reqBody       []byte
	state                    string
	attempts, lastStatus     int64
	reason                   string
	notExecuted              bool
	errText                  string
	respStatus               *int64
	respHeader, respBody     []byte
	createdNs, updatedNs     int64
	owner                    *string
	leaseUntilNs             *int64
	fence                    int64
	note                     string
}

// nanos converts t to Unix nanoseconds: math.MinInt64 for the zero time, an error wrapping
// keystore.ErrInvalid outside the years 1678 to 2262, which int64 nanoseconds cannot hold.
func nanos(what string, t time.Time) (int64, error) {
	if t.IsZero() {
		return math.MinInt64, nil
	}
	if t.Year() < 1678 || t.Year() > 2261 {
		return 0, errors.Join(keystore.ErrInvalid, fmt.Errorf("%s %v is outside the years 1678 to 2261", what, t))
	}
	return t.UnixNano(), nil
}

func fromNanos(n int64) time.Time {
	if n == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// encode validates rec, strips its secrets and returns the row to write, with the stored copy.
// Errors wrap keystore.ErrInvalid.
func encode(rec *keystore.Record, secret []string) (*row, *keystore.Record, error) {
	if err := rec.Validate(); err != nil {
		return nil, nil, err
	}
	s := keystore.StoredCopy(rec, secret...)
	if err := checkText(s); err != nil {
		return nil, nil, errors.Join(keystore.ErrInvalid, err)
	}
	r := &row{
		tenant: []byte(s.Scope), key: []byte(s.Key),
		fingerprint: s.Fingerprint, method: s.Request.Method, url: s.Request.URL,
		reqBody: nonNil(s.Request.Body), state: string(s.State),
		attempts: int64(s.Attempts), lastStatus: int64(s.LastStatusCode), reason: s.Reason,
		notExecuted: s.NotExecuted, errText: s.Error, fence: s.Fence, note: s.Note,
	}
	if s.Intent != "" {
		r.intent = []byte(s.Intent)
	}
	var err error
	if r.reqHeader, err = json.Marshal(s.Request.Header); err != nil {
		return nil, nil, errors.Join(keystore.ErrInvalid, err)
	}
	if s.Response != nil {
		st := int64(s.Response.StatusCode)
		r.respStatus, r.respBody = &st, nonNil(s.Response.Body)
		if r.respHeader, err = json.Marshal(s.Response.Header); err != nil {
			return nil, nil, errors.Join(keystore.ErrInvalid, err)
		}
	}
	if r.createdNs, err = nanos("CreatedAt", s.CreatedAt); err != nil {
		return nil, nil, err
	}
	if r.updatedNs, err = nanos("UpdatedAt", s.UpdatedAt); err != nil {
		return nil, nil, err
	}
	if s.Owner != "" {
		r.owner = &s.Owner
	}
	if !s.LeaseUntil.IsZero() {
		n, err := nanos("LeaseUntil", s.LeaseUntil)
		if err != nil {
			return nil, nil, err
		}
		r.leaseUntilNs = &n
	}
	return r, s, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// checkText refuses what a text column or JSON cannot store unchanged: invalid UTF-8 (JSON
// replaces it) and NUL bytes (PostgreSQL text refuses them).
func checkText(r *keystore.Record) error {
	for name, s := range map[string]string{
		"fingerprint": r.Fingerprint, "method": r.Request.Method, "url": r.Request.URL,
		"reason": r.Reason, "error": r.Error, "owner": r.Owner, "note": r.Note,
	} {
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("%s is not valid UTF-8 without NUL bytes", name)
		}
	}
	if err := keystore.CheckHeaderText("request", r.Request.Header); err != nil {
		return err
	}
	if r.Response != nil {
		return keystore.CheckHeaderText("response", r.Response.Header)
	}
	return nil
}

// args returns the values of the columns in columns order, for an INSERT.
func (r *row) args() []any {
	return []any{r.tenant, r.key, r.intent, r.fingerprint, r.method, r.url, r.reqHeader, r.reqBody,
		r.state, r.attempts, r.lastStatus, r.reason, r.notExecuted, r.errText,
		r.respStatus, r.respHeader, r.respBody, r.createdNs, r.updatedNs,
		r.owner, r.leaseUntilNs, r.fence, r.note}
}

// scanRecord reads one row selected with columns.
func scanRecord(s pgx.Row) (*keystore.Record, error) {
	var r row
	if err := r.scan(s); err != nil {
		return nil, err
	}
	return r.record()
}

// scan reads one row selected with columns, without decoding it.
func (r *row) scan(s pgx.Row) error {
	return s.Scan(&r.tenant, &r.key, &r.intent, &r.fingerprint, &r.method, &r.url, &r.reqHeader, &r.reqBody,
		&r.state, &r.attempts, &r.lastStatus, &r.reason, &r.notExecuted, &r.errText,
		&r.respStatus, &r.respHeader, &r.respBody, &r.createdNs, &r.updatedNs,
		&r.owner, &r.leaseUntilNs, &r.fence, &r.note)
}

// record decodes a scanned row: ErrCorrupt when it does not decode.
func (r *row) record() (*keystore.Record, error) {
	rec := &keystore.Record{
		Scope: string(r.tenant), Key: string(r.key), Intent: string(r.intent),
		Fingerprint: r.fingerprint,
		Request:     keystore.Request{Method: r.method, URL: r.url, Body: r.reqBody},
		State:       keystore.State(r.state), Attempts: int(r.attempts), LastStatusCode: int(r.lastStatus),
		Reason: r.reason, NotExecuted: r.notExecuted, Error: r.errText,
		CreatedAt: fromNanos(r.createdNs), UpdatedAt: fromNanos(r.updatedNs), Fence: r.fence, Note: r.note,
	}
	if err := unmarshalHeader(r.reqHeader, &rec.Request.Header); err != nil {
		return nil, err
	}
	if r.respStatus != nil {
		rec.Response = &keystore.Response{StatusCode: int(*r.respStatus), Body: r.respBody}
		if err := unmarshalHeader(r.respHeader, &rec.Response.Header); err != nil {
			return nil, err
		}
	}
	if r.owner != nil {
		rec.Owner = *r.owner
	}
	if r.leaseUntilNs != nil {
		rec.LeaseUntil = fromNanos(*r.leaseUntilNs)
	}
	return rec, nil
}

// ErrCorrupt: a row does not decode (header JSON damaged outside this package).
var ErrCorrupt = errors.New("pgstore: stored record does not decode")

func unmarshalHeader(b []byte, h *http.Header) error {
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, h); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return nil
}
