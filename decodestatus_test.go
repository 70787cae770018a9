package idem

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
		want   Status
	}{
		// the three convention answers
		{"completed", 200, nil,
			`{"status":"completed","response_status":201,"response_body":{"id":"pay_1",  "amount": 500,"nested":{"a":[1,2]}}}`,
			Status{State: StatusCompleted, ResponseStatus: 201, ResponseBody: []byte(`{"id":"pay_1",  "amount": 500,"nested":{"a":[1,2]}}`)}},
		{"completed with a string body", 200, nil,
			`{"status":"completed","response_status":200,"response_body":"ok"}`,
			Status{State: StatusCompleted, ResponseStatus: 200, ResponseBody: []byte(`"ok"`)}},
		{"completed without body", 200, nil,
			`{"status":"completed","response_status":204}`,
			Status{State: StatusCompleted, ResponseStatus: 204}},
		{"completed with null body has no body", 200, nil,
			`{"status":"completed","response_status":204,"response_body":null}`,
			Status{State: StatusCompleted, ResponseStatus: 204}},
		{"completed stored 4xx", 200, nil,
			`{"status":"completed","response_status":402,"response_body":{"error":"card_declined"}}`,
			Status{State: StatusCompleted, ResponseStatus: 402, ResponseBody: []byte(`{"error":"card_declined"}`)}},
		{"completed response_status 100", 200, nil, `{"status":"completed","response_status":100}`,
			Status{State: StatusCompleted, ResponseStatus: 100}},
		{"completed response_status 599", 200, nil, `{"status":"completed","response_status":599}`,
			Status{State: StatusCompleted, ResponseStatus: 599}},
		{"completed with extra fields", 200, nil, `{"status":"completed","response_status":201,"created":1,"key":"k"}`,
			Status{State: StatusCompleted, ResponseStatus: 201}},
		{"processing with Retry-After seconds", 202, ra("2"), `{"status":"processing"}`,
			Status{State: StatusProcessing, RetryAfter: 2 * time.Second, HasRetryAfter: true}},
		{"processing with Retry-After date", 202, ra("Fri, 01 Mar 2024 12:00:30 GMT"), `{"status":"processing"}`,
			Status{State: StatusProcessing, RetryAfter: 30 * time.Second, HasRetryAfter: true}},
		{"processing with bad Retry-After", 202, ra("soon"), `{"status":"processing"}`,
			Status{State: StatusProcessing}},
		{"processing without Retry-After", 202, http.Header{}, `{"status":"processing"}`,
			Status{State: StatusProcessing}},
		{"not found", 404, nil, `{"status":"not_found"}`, Status{State: StatusNotFound}},

		// mismatches and garbage: still unknown
		{"200 processing", 200, nil, `{"status":"processing"}`, Status{}},
		{"200 not_found", 200, nil, `{"status":"not_found"}`, Status{}},
		{"202 completed", 202, nil, `{"status":"completed","response_status":201}`, Status{}},
		{"404 completed", 404, nil, `{"status":"completed","response_status":201}`, Status{}},
		{"404 without body", 404, nil, ``, Status{}},
		{"404 processing", 404, nil, `{"status":"processing"}`, Status{}},
		{"500 completed", 500, nil, `{"status":"completed","response_status":201}`, Status{}},
		{"500 with Retry-After keeps the hint", 500, ra("3"), `oops`,
			Status{RetryAfter: 3 * time.Second, HasRetryAfter: true}},
		{"201 completed", 201, nil, `{"status":"completed","response_status":201}`, Status{}},
		{"completed response_status 0", 200, nil, `{"status":"completed","response_status":0}`, Status{}},
		{"completed response_status missing", 200, nil, `{"status":"completed","response_body":{}}`, Status{}},
		{"completed response_status 99", 200, nil, `{"status":"completed","response_status":99}`, Status{}},
		{"completed response_status 600", 200, nil, `{"status":"completed","response_status":600}`, Status{}},
		{"completed response_status negative", 200, nil, `{"status":"completed","response_status":-201}`, Status{}},
		{"completed response_status as string", 200, nil, `{"status":"completed","response_status":"201"}`, Status{}},
		{"completed response_status fractional", 200, nil, `{"status":"completed","response_status":201.5}`, Status{}},
		{"status value is case-sensitive", 200, nil, `{"status":"Completed","response_status":201}`, Status{}},
		{"non-JSON", 200, nil, `<html>completed</html>`, Status{}},
		{"truncated JSON", 200, nil, `{"status":"completed","response_status":201`, Status{}},
		{"trailing garbage", 200, nil, `{"status":"completed","response_status":201} x`, Status{}},
		{"empty body", 200, nil, ``, Status{}},
		{"JSON null body", 200, nil, `null`, Status{}},
		{"JSON array", 200, nil, `[]`, Status{}},
		{"empty object", 200, nil, `{}`, Status{}},
		{"status null", 200, nil, `{"status":null,"response_status":201}`, Status{}},
		{"status number", 202, nil, `{"status":1}`, Status{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecodeStatus(tt.code, tt.header, []byte(tt.body), now)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeStatusBodyIsNotAliased(t *testing.T) {
	body := []byte(`{"status":"completed","response_status":201,"response_body":{"id":"p"}}`)
	st := DecodeStatus(200, nil, body, time.Time{})
	want := append([]byte(nil), st.ResponseBody...)
	for i := range body {
		body[i] = 'x'
	}
	assert.Equal(t, want, st.ResponseBody, "ResponseBody must not share the input buffer")
	assert.Equal(t, `{"id":"p"}`, string(st.ResponseBody))
}

func TestStatusStateString(t *testing.T) {
	tests := []struct {
		s    StatusState
		want string
	}{
		{StatusUnknown, "unknown"},
		{StatusCompleted, "completed"},
		{StatusProcessing, "processing"},
		{StatusNotFound, "not_found"},
		{StatusState(4), "unknown"},
		{StatusState(-1), "unknown"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.s.String())
	}
}
