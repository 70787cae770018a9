package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// StatusState is what a status endpoint says about a key.
type StatusState int

const (
	// StatusUnknown: the answer could not be understood, or the endpoint failed. Ask again
	// (bounded by Policy.MaxStatusChecks).
	StatusUnknown StatusState = iota
	// StatusCompleted: the server has a final answer for the key; Status.ResponseStatus and
	// ResponseBody hold it. No resend.
	StatusCompleted
	// StatusProcessing: the server is still executing the key. Wait, then ask again.
	StatusProcessing
	// StatusNotFound: the server never executed the key; resending with it is safe.
	StatusNotFound
)

var statusNames = [...]string{"unknown", "completed", "processing", "not_found"}

// String returns the state as the default status convention spells it.
func (s StatusState) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// Status is a status endpoint's answer about one key.
type Status struct {
	State          StatusState   // StatusCompleted, StatusProcessing, StatusNotFound, or StatusUnknown
	ResponseStatus int           // the stored HTTP status of the operation, when completed
	ResponseBody   []byte        // the stored response body, when completed
	RetryAfter     time.Duration // the server's Retry-After on this answer, if HasRetryAfter
	HasRetryAfter  bool          // the answer carried a valid Retry-After
}

// StatusRequest says which operation a StatusFunc is asked about.
type StatusRequest struct {
	Key    string      // the idempotency key
	Scope  string      // the tenant scope
	Method string      // the operation's method
	URL    string      // the operation's URL as given
	Header http.Header // the operation's headers, credentials included when known
}

// StatusFunc asks an API whether an operation was executed. APIs whose status endpoint does
// not follow the default convention (see DecodeStatus) plug their own in through
// Config.StatusFunc or WithStatusFunc. A returned error counts as StatusUnknown.
type StatusFunc func(ctx context.Context, req StatusRequest) (Status, error)

// statusBody is the default JSON convention:
// 200 {"status":"completed","response_status":201,"response_body":{...}},
// 202 {"status":"processing"}, 404 {"status":"not_found"}.
type statusBody struct {
	Status         string          `json:"status"`
	ResponseStatus int             `json:"response_status"`
	ResponseBody   json.RawMessage `json:"response_body"`
}

// DecodeStatus interprets a status endpoint's answer in the default convention. It never
// fails: anything it does not recognise is StatusUnknown. The HTTP status and the body's
// "status" field must agree (200 completed, 202 processing, 404 not_found); a completed
// answer needs a response_status in 100..599.
func DecodeStatus(code int, header http.Header, body []byte, now time.Time) Status {
	var st Status
	if header != nil {
		st.RetryAfter, st.HasRetryAfter = ParseRetryAfter(header.Get("Retry-After"), now)
	}
	var b statusBody
	if err := json.Unmarshal(body, &b); err != nil {
		return st
	}
	switch {
	case code == http.StatusOK && b.Status == "completed":
		if b.ResponseStatus < 100 || b.ResponseStatus > 599 {
			return st
		}
		st.State, st.ResponseStatus = StatusCompleted, b.ResponseStatus
		if len(b.ResponseBody) > 0 && !bytes.Equal(b.ResponseBody, []byte("null")) {
			st.ResponseBody = []byte(b.ResponseBody)
		}
	case code == http.StatusAccepted && b.Status == "processing":
		st.State = StatusProcessing
	case code == http.StatusNotFound && b.Status == "not_found":
		st.State = StatusNotFound
	}
	return st
}
