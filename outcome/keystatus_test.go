package outcome

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDecodeStatus(t *testing.T) {
	now := time.Date(2024, time.March, 1, 12, 0, 0, 0, time.UTC)
	ra := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	tests := []struct {
		name   string
		code   int
		header http.Header
		body   string
		want   KeyStatus
	}{
		// the three convention answers
		{"completed", 200, nil,
			`{"status":"completed","response_status":201,"response_body":{"id":"pay_1",  "amount": 500,"nested":{"a":[1,2]}}}`,
			KeyStatus{State: KeyStatusCompleted, ResponseStatusCode: 201, ResponseBody: []byte(`{"id":"pay_1",  "amount": 500,"nested":{"a":[1,2]}}`)}},
		{"completed with a string body", 200, nil,
			`{"status":"completed","response_status":200,"response_body":"ok"}`,
			KeyStatus{State: KeyStatusCompleted, ResponseStatusCode: 200, ResponseBody: []byte(`"ok"`)}},
		{"completed without body", 200, nil,
			`{"status":"completed","response_status":204}`,
			KeyStatus{State: KeyStatusCompleted, ResponseStatusCode: 204}},
		{"completed with null body has no body", 200, nil,
			`{"status":"completed","response_status":204,"response_body":null}`,
			KeyStatus{State: KeyStatusCompleted, ResponseStatusCode: 204}},
		{"completed stored 4xx", 200, nil,
			`{"status":"completed","response_status":402,"response_body":{"error":"card_declined"}}`,
			KeyStatus{State: KeyStatusCompleted, ResponseStatusCode: 402, ResponseBody: []byte(`{"error":"card_declined"}`)}},
		{"completed response_status 100", 200, nil, `{"status":"completed","response_status":100}`,
			KeyStatus{State: KeyStatusCompleted, ResponseStatusCode: 100}},
		{"completed response_status 599", 200, nil, `{"status":"completed","response_status":599}`,
			KeyStatus{State: KeyStatusCompleted, ResponseStatusCode: 599}},
		{"completed with extra fields", 200, nil, `{"status":"completed","response_status":201,"created":1,"key":"k"}`,
			KeyStatus{State: KeyStatusCompleted, ResponseStatusCode: 201}},
		{"processing with Retry-After seconds", 202, ra("2"), `{"status":"processing"}`,
			KeyStatus{State: KeyStatusProcessing, RetryAfter: 2 * time.Second, HasRetryAfter: true}},
		{"processing with Retry-After date", 202, ra("Fri, 01 Mar 2024 12:00:30 GMT"), `{"status":"processing"}`,
			KeyStatus{State: KeyStatusProcessing, RetryAfter: 30 * time.Second, HasRetryAfter: true}},
		{"processing with bad Retry-After", 202, ra("soon"), `{"status":"processing"}`,
			KeyStatus{State: KeyStatusProcessing}},
		{"processing without Retry-After", 202, http.Header{}, `{"status":"processing"}`,
			KeyStatus{State: KeyStatusProcessing}},
		{"not found", 404, nil, `{"status":"not_found"}`, KeyStatus{State: KeyStatusNotFound}},

		// mismatches and garbage: still unknown
		{"200 processing", 200, nil, `{"status":"processing"}`, KeyStatus{}},
		{"200 not_found", 200, nil, `{"status":"not_found"}`, KeyStatus{}},
		{"202 completed", 202, nil, `{"status":"completed","response_status":201}`, KeyStatus{}},
		{"404 completed", 404, nil, `{"status":"completed","response_status":201}`, KeyStatus{}},
		{"404 without body", 404, nil, ``, KeyStatus{}},
		{"404 processing", 404, nil, `{"status":"processing"}`, KeyStatus{}},
		{"500 completed", 500, nil, `{"status":"completed","response_status":201}`, KeyStatus{}},
		{"500 with Retry-After keeps the hint", 500, ra("3"), `oops`,
			KeyStatus{RetryAfter: 3 * time.Second, HasRetryAfter: true}},
		{"201 completed", 201, nil, `{"status":"completed","response_status":201}`, KeyStatus{}},
		{"completed response_status 0", 200, nil, `{"status":"completed","response_status":0}`, KeyStatus{}},
		{"completed response_status missing", 200, nil, `{"status":"completed","response_body":{}}`, KeyStatus{}},
		{"completed response_status 99", 200, nil, `{"status":"completed","response_status":99}`, KeyStatus{}},
		{"completed response_status 600", 200, nil, `{"status":"completed","response_status":600}`, KeyStatus{}},
		{"completed response_status negative", 200, nil, `{"status":"completed","response_status":-201}`, KeyStatus{}},
		{"completed response_status as string", 200, nil, `{"status":"completed","response_status":"201"}`, KeyStatus{}},
		{"completed response_status fractional", 200, nil, `{"status":"completed","response_status":201.5}`, KeyStatus{}},
		{"status value is case-sensitive", 200, nil, `{"status":"Completed","response_status":201}`, KeyStatus{}},
		{"non-JSON", 200, nil, `<html>completed</html>`, KeyStatus{}},
		{"truncated JSON", 200, nil, `{"status":"completed","response_status":201`, KeyStatus{}},
		{"trailing garbage", 200, nil, `{"status":"completed","response_status":201} x`, KeyStatus{}},
		{"empty body", 200, nil, ``, KeyStatus{}},
		{"JSON null body", 200, nil, `null`, KeyStatus{}},
		{"JSON array", 200, nil, `[]`, KeyStatus{}},
		{"empty object", 200, nil, `{}`, KeyStatus{}},
		{"status null", 200, nil, `{"status":null,"response_status":201}`, KeyStatus{}},
		{"status number", 202, nil, `{"status":1}`, KeyStatus{}},
		// a member twice: parsers disagree on which counts (encoding/json keeps the last)
		{"status twice", 404, nil, `{"status":"processing","status":"not_found"}`, KeyStatus{}},
		{"status twice, other case", 404, nil, `{"Status":"processing","status":"not_found"}`, KeyStatus{}},
		{"status twice, folded letter", 404, nil, `{"ſtatus":"processing","status":"not_found"}`, KeyStatus{}},
		{"response_status twice", 200, nil, `{"status":"completed","response_status":500,"response_status":201}`, KeyStatus{}},
		{"a name twice inside response_body is the body's business", 200, nil,
			`{"status":"completed","response_status":201,"response_body":{"a":1,"a":2}}`,
			KeyStatus{State: KeyStatusCompleted, ResponseStatusCode: 201, ResponseBody: []byte(`{"a":1,"a":2}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecodeKeyStatus(tt.code, tt.header, []byte(tt.body), now)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeStatusBodyIsNotAliased(t *testing.T) {
	body := []byte(`{"status":"completed","response_status":201,"response_body":{"id":"p"}}`)
	st := DecodeKeyStatus(200, nil, body, time.Time{})
	want := append([]byte(nil), st.ResponseBody...)
	for i := range body {
		body[i] = 'x'
	}
	assert.Equal(t, want, st.ResponseBody, "ResponseBody must not share the input buffer")
	assert.Equal(t, `{"id":"p"}`, string(st.ResponseBody))
}

func TestStatusStateString(t *testing.T) {
	tests := []struct {
		s    KeyStatusState
		want string
	}{
		{KeyStatusUnknown, "unknown"},
		{KeyStatusCompleted, "completed"},
		{KeyStatusProcessing, "processing"},
		{KeyStatusNotFound, "not_found"},
		{KeyStatusState(4), "unknown"},
		{KeyStatusState(-1), "unknown"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.s.String())
	}
}
