package outcome

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/jsonx"
)

// KeyStatusState is what a status endpoint says about a key.
type KeyStatusState int

const (
	// KeyStatusUnknown: the answer could not be understood, or the endpoint failed. Ask again
	// (bounded by idem.Policy.MaxKeyStatusChecks).
	KeyStatusUnknown KeyStatusState = iota
	// KeyStatusCompleted: the server has a final answer for the key; KeyStatus.ResponseStatusCode and
	// ResponseBody hold it. No resend. A "final answer" of 408, 409, 425 or 429 (statuses that
	// never end an operation) is read as no answer (KeyStatusUnknown), never as a failure.
	KeyStatusCompleted
	// KeyStatusProcessing: the server is still executing the key. Wait, then ask again; when
	// every one of idem.Policy.MaxKeyStatusChecks asks says so, resend with the key (a server that
	// keeps the contract answers 409 while it runs, and resumes a key whose owner died).
	KeyStatusProcessing
	// KeyStatusNotFound: the server never executed the key; resending with it is safe.
	KeyStatusNotFound
)

var statusNames = [...]string{"unknown", "completed", "processing", "not_found"}

// String returns the state as the default status convention spells it.
func (s KeyStatusState) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// KeyStatus is a status endpoint's answer about one key.
type KeyStatus struct {
	State              KeyStatusState // KeyStatusCompleted, KeyStatusProcessing, KeyStatusNotFound, or KeyStatusUnknown
	ResponseStatusCode int            // the stored HTTP status of the operation, when completed
	ResponseBody       []byte         // the stored response body, when completed: response_body's JSON value as sent, not the original bytes (idemserver compacts JSON and sends any other body as a JSON string)
	RetryAfter         time.Duration  // the server's Retry-After on this answer, if HasRetryAfter
	HasRetryAfter      bool           // the answer carried a valid Retry-After
}

// KeyStatusRequest says which operation a KeyStatusFunc is asked about.
type KeyStatusRequest struct {
	Key    string      // the idempotency key
	Scope  string      // the tenant scope
	Method string      // the operation's method
	URL    string      // the operation's URL as given
	Header http.Header // a copy of the operation's headers, credentials included when known; never nil
}

// KeyStatusFunc asks an API whether an operation was executed. APIs whose status endpoint does
// not follow the default convention (see DecodeKeyStatus) plug their own in through
// idem.Config.KeyStatusFunc or idem.CallKeyStatusFunc. A returned error counts as KeyStatusUnknown.
type KeyStatusFunc func(ctx context.Context, req KeyStatusRequest) (KeyStatus, error)

// statusBody is the default JSON convention:
// 200 {"status":"completed","response_status":201,"response_body":{...}},
// 202 {"status":"processing"}, 404 {"status":"not_found"}.
type statusBody struct {
	Status         string          `json:"status"`
	ResponseStatus int             `json:"response_status"`
	ResponseBody   json.RawMessage `json:"response_body"`
}

// DecodeKeyStatus interprets a status endpoint's answer in the default convention. It never
// fails: anything it does not recognise is KeyStatusUnknown. The HTTP status and the body's
// "status" field must agree (200 completed, 202 processing, 404 not_found); a completed
// answer needs a response_status in 100..599.
func DecodeKeyStatus(code int, header http.Header, body []byte, now time.Time) KeyStatus {
	var st KeyStatus
	if header != nil {
		st.RetryAfter, st.HasRetryAfter = ParseRetryAfter(header.Get("Retry-After"), now)
	}
	var b statusBody
	if err := json.Unmarshal(body, &b); err != nil || jsonx.DuplicateMember(body) {
		return st
	}
	switch {
	case code == http.StatusOK && b.Status == "completed":
		if b.ResponseStatus < 100 || b.ResponseStatus > 599 {
			return st
		}
		st.State, st.ResponseStatusCode = KeyStatusCompleted, b.ResponseStatus
		if len(b.ResponseBody) > 0 && !bytes.Equal(b.ResponseBody, []byte("null")) {
			st.ResponseBody = []byte(b.ResponseBody)
		}
	case code == http.StatusAccepted && b.Status == "processing":
		st.State = KeyStatusProcessing
	case code == http.StatusNotFound && b.Status == "not_found":
		st.State = KeyStatusNotFound
	}
	return st
}
