package idemadmin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/keystore"
)

var adminNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const adminToken = "Bearer s3cret"

func tokenAuth(r *http.Request) error {
	if r.Header.Get("Authorization") != adminToken {
		return errors.New("a valid admin token is required")
	}
	return nil
}

// adminEnv is a client on a fixed clock with four records: manual (30 h old, a stored 500),
// pending (2 h, a real payment the API never saw), succeeded (100 h) and, in tenant acme,
// pending (5 min).
func adminEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	e.clock.now = adminNow
	add := func(scope, key, intent string, st keystore.State, age time.Duration, reason string, resp *keystore.Response) {
		body := paymentBody(1250, "ref-"+key)
		at := adminNow.Add(-age)
		require.NoError(t, e.store.Create(context.Background(), &keystore.Record{
			Scope: scope, Key: key, Intent: intent, Fingerprint: idem.Fingerprint(http.MethodPost, "/v1/payments", body),
			State: st, Attempts: 1, LastStatusCode: map[bool]int{true: 500}[reason != ""], Reason: reason,
			Request: keystore.Request{Method: http.MethodPost, URL: "/v1/payments",
				Header: http.Header{"Content-Type": {"application/json"}}, Body: body},
			Response: resp, CreatedAt: at, UpdatedAt: at}))
	}
	add("", "k-manual", "order-2", keystore.StateManual, 30*time.Hour, keystore.ReasonStoredServerError, &keystore.Response{StatusCode: 500, Body: []byte(`{"error":"boom"}`)})
	add("", "k-pending", "order-1", keystore.StatePending, 2*time.Hour, "", nil)
	add("", "k-ok", "order-3", keystore.StateSucceeded, 100*time.Hour, "", &keystore.Response{StatusCode: 201, Body: []byte(`{"id":"pay_1"}`)})
	add("acme", "k-acme", "order-1", keystore.StatePending, 5*time.Minute, "", nil)
	return e
}

// adminDo sends one request to h and returns the status, the Content-Type and the body.
func adminDo(t *testing.T, h http.Handler, method, target, body string, auth bool) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth {
		req.Header.Set("Authorization", adminToken)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, w.Header(), w.Body.String()
}

func problemJSON(status int, detail string) string {
	b, _ := json.Marshal(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail})
	return string(b)
}

func TestAdminRefusesWithoutAuthorization(t *testing.T) {
	e := adminEnv(t)
	for _, tt := range []struct {
		name   string
		h      http.Handler
		auth   bool
		status int
		detail string
	}{
		{"no Authorize function", NewHandler(e.c, Options{}), true, 403,
			"the admin handler has no Authorize function: every request is refused"},
		{"Authorize refuses", NewHandler(e.c, Options{Authorize: tokenAuth}), false, 401,
			"unauthorized: a valid admin token is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range [][2]string{{"GET", "/records"}, {"GET", "/record?key=k-ok"}, {"GET", "/stats"},
				{"POST", "/recover"}, {"POST", "/resolve"}, {"GET", "/nowhere"}, {"DELETE", "/records"}} {
				code, hdr, body := adminDo(t, tt.h, r[0], r[1], `{"key":"k-manual","verdict":"executed","note":"x"}`, tt.auth)
				assert.Equal(t, tt.status, code, r)
				assert.Equal(t, "application/problem+json", hdr.Get("Content-Type"))
				assert.JSONEq(t, problemJSON(tt.status, tt.detail), body, r)
			}
		})
	}
	// Nothing was resolved or recovered.
	assert.Equal(t, keystore.StateManual, e.record("k-manual").State)
	assert.Equal(t, keystore.StatePending, e.record("k-pending").State)
	assert.Equal(t, int64(0), e.c.Stats().Calls)
}

func TestAdminList(t *testing.T) {
	e := adminEnv(t)
	h := NewHandler(e.c, Options{Authorize: tokenAuth, MaxLimit: 2})
	row := func(scope, key, intent, state string, attempts, last int, reason string, age time.Duration) string {
		at := adminNow.Add(-age).Format(time.RFC3339)
		b, _ := json.Marshal(map[string]any{"tenant": scope, "key": key, "state": state, "method": "POST",
			"url": "/v1/payments", "attempts": attempts, "age_seconds": int64(age / time.Second),
			"created_at": at, "updated_at": at})
		s := string(b[:len(b)-1])
		if intent != "" {
			s += `,"intent":"` + intent + `"`
		}
		if last != 0 {
			s += `,"last_status":500,"reason":"` + reason + `"`
		}
		return s + "}"
	}
	manual := row("", "k-manual", "order-2", "manual", 1, 500, keystore.ReasonStoredServerError, 30*time.Hour)
	pending := row("", "k-pending", "order-1", "pending", 1, 0, "", 2*time.Hour)
	acme := row("acme", "k-acme", "order-1", "pending", 1, 0, "", 5*time.Minute)
	ok := row("", "k-ok", "order-3", "succeeded", 1, 0, "", 100*time.Hour)
	for _, tt := range []struct{ query, want string }{
		{"state=pending,manual", `{"records":[` + manual + `,` + pending + `],"total":3,"next_offset":2,"next_after":"<after k-pending>","damaged":[]}`},
		{"state=pending,manual&offset=2", `{"records":[` + acme + `],"total":3,"damaged":[]}`},
		{"state=pending,manual&min_age=1h&limit=1&offset=1", `{"records":[` + pending + `],"total":2,"damaged":[]}`},
		{"tenant=acme", `{"records":[` + acme + `],"total":1,"damaged":[]}`},
		{"tenant=&state=succeeded", `{"records":[` + ok + `],"total":1,"damaged":[]}`},
		{"state=failed", `{"records":[],"total":0,"damaged":[]}`},
		{"offset=9223372036854775800", `{"records":[],"total":4,"damaged":[]}`}, // offset+limit would overflow
	} {
		code, hdr, body := adminDo(t, h, "GET", "/records?"+tt.query, "", true)
		require.Equal(t, 200, code, body)
		assert.Equal(t, "application/json", hdr.Get("Content-Type"))
		if strings.Contains(tt.want, "<after k-pending>") { // the cursor names the page's last record
			var page struct {
				NextAfter string `json:"next_after"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &page))
			c, err := parseListCursor(page.NextAfter)
			require.NoError(t, err)
			assert.Equal(t, listCursor{created: c.created, scope: "", key: "k-pending"}, c)
			tt.want = strings.Replace(tt.want, "<after k-pending>", page.NextAfter, 1)
			// The next page after it: what follows, whatever was settled meanwhile.
			_, _, next := adminDo(t, h, "GET", "/records?state=pending,manual&after="+page.NextAfter, "", true)
			assert.JSONEq(t, `{"records":[`+acme+`],"total":3,"damaged":[]}`, next)
		}
		assert.JSONEq(t, tt.want, body, tt.query)
	}
	for _, tt := range []struct{ query, detail string }{
		{"state=done", `unknown state "done" (pending, succeeded, failed, manual)`},
		{"min_age=ten", `min_age "ten" is not a non-negative duration such as 10m`},
		{"min_age=-1h", `min_age "-1h" is not a non-negative duration such as 10m`},
		{"limit=3", `limit "3" must be a whole number, 1 to 2`},
		{"limit=0", `limit "0" must be a whole number, 1 to 2`},
		{"offset=-1", `offset "-1" must be a whole number, at least 0`},
		{"after=not-a-cursor", `after "not-a-cursor" is not a next_after value of this endpoint, or comes with an offset`},
		{"after=MTIzAGs&offset=1", `after "MTIzAGs" is not a next_after value of this endpoint, or comes with an offset`},
	} {
		code, _, body := adminDo(t, h, "GET", "/records?"+tt.query, "", true)
		assert.Equal(t, 400, code, tt.query)
		assert.JSONEq(t, problemJSON(400, tt.detail), body, tt.query)
	}
	code, hdr, body := adminDo(t, h, "POST", "/records", "", true)
	assert.Equal(t, 405, code)
	assert.Equal(t, "GET", hdr.Get("Allow"))
	assert.JSONEq(t, problemJSON(405, "/records takes GET, not POST"), body)
	code, _, body = adminDo(t, h, "GET", "/recover", "", true)
	assert.Equal(t, 405, code)
	assert.JSONEq(t, problemJSON(405, "/recover takes POST, not GET"), body)
	code, _, body = adminDo(t, h, "GET", "/nowhere", "", true)
	assert.Equal(t, 404, code)
	assert.JSONEq(t, problemJSON(404, `no admin endpoint "/nowhere" (records, record, resolve, recover, stats)`), body)
}

// secretStore answers Get with a credential header, as a keystore written by something
// other than idem might: the handler must not show it.
type secretStore struct{ keystore.Store }

func (s secretStore) Get(ctx context.Context, scope, key string) (*keystore.Record, error) {
	rec, err := s.Store.Get(ctx, scope, key)
	if rec != nil {
		rec.Request.Header.Set("Authorization", "Bearer leaked")
		rec.Request.Header.Set("X-Api-Key", "leaked")
		rec.Response.Header = http.Header{"Set-Cookie": {"session=leaked"}, "Content-Type": {"application/json"}}
	}
	return rec, err
}

func TestAdminShow(t *testing.T) {
	e := adminEnv(t)
	c, err := idem.NewClient(idem.Config{BaseURL: e.srv.URL, Store: secretStore{e.store}, Now: e.clock.Now,
		SecretHeaders: []string{"X-Api-Key"}})
	require.NoError(t, err)
	h := NewHandler(c, Options{Authorize: tokenAuth})
	want, err := json.Marshal(e.record("k-ok"))
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(want, &rec))
	rec["response"].(map[string]any)["header"] = map[string]any{"Content-Type": []any{"application/json"}}
	want, _ = json.Marshal(rec)

	code, _, body := adminDo(t, h, "GET", "/record?key=k-ok", "", true)
	require.Equal(t, 200, code, body)
	assert.JSONEq(t, string(want), body)
	assert.NotContains(t, body, "leaked")

	code, _, body = adminDo(t, h, "GET", "/record?tenant=acme&intent=order-1", "", true)
	require.Equal(t, 200, code, body)
	var got keystore.Record
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	assert.Equal(t, e.record2("acme", "k-acme"), &got)

	for _, tt := range []struct {
		query  string
		status int
		detail string
	}{
		{"key=nope", 404, `no record for key "nope" in tenant ""`},
		{"tenant=acme&intent=order-9", 404, `no record for intent "order-9" in tenant "acme"`},
		{"", 400, "name the record by key or by intent (one of the two), with its tenant"},
		{"key=k-ok&intent=order-3", 400, "name the record by key or by intent (one of the two), with its tenant"},
	} {
		code, _, body := adminDo(t, h, "GET", "/record?"+tt.query, "", true)
		assert.Equal(t, tt.status, code, tt.query)
		assert.JSONEq(t, problemJSON(tt.status, tt.detail), body, tt.query)
	}
}

func (e *env) record2(scope, key string) *keystore.Record {
	e.t.Helper()
	rec, err := e.store.Get(context.Background(), scope, key)
	require.NoError(e.t, err)
	return rec
}

func TestAdminResolve(t *testing.T) {
	e := adminEnv(t)
	h := NewHandler(e.c, Options{Authorize: tokenAuth})
	for _, tt := range []struct {
		body   string
		status int
		detail string
	}{
		{`{"key":"k-pending","verdict":"executed","note":"ticket 7"}`, 409,
			`key "k-pending": record is pending; only a manual record can be resolved`},
		{`{"intent":"order-3","verdict":"not_executed","note":"ticket 7"}`, 409,
			`key "k-ok": record is succeeded; only a manual record can be resolved`},
		{`{"key":"k-manual","verdict":"maybe","note":"x"}`, 400, `verdict "maybe": want "executed" or "not_executed"`},
		{`{"key":"k-manual","verdict":"executed","note":" "}`, 400, "a note is required: who decided, and on what evidence"},
		{`{"key":"k-manual","verdict":"not_executed","note":"x","response":{"status":200}}`, 400,
			"a response goes only with the executed verdict"},
		{`{"key":"k-manual","verdict":"executed","note":"x","response":{"status":99}}`, 400,
			"response status 99 is not an HTTP status"},
		{`{"key":"k-manual","verdict":"executed","note":"x","response":{"status":500}}`, 400,
			"idem: invalid operation: an executed verdict needs a 2xx answer, got status 500"},
		{`{"key":"k-manual","verdict":"executed","note":"x","response":{"status":302}}`, 400,
			"idem: invalid operation: an executed verdict needs a 2xx answer, got status 302"},
		{`{"verdict":"executed","note":"x"}`, 400, "name the record by key or by intent (one of the two), with its tenant"},
		{`{"key":"nope","verdict":"executed","note":"x"}`, 404, `no record for key "nope" in tenant ""`},
		{`{"key":"k-manual","verdict":"executed","note":"x","amount":3}`, 400,
			`the body must be one JSON resolve request: json: unknown field "amount"`},
		{`{"key":"k-manual","verdict":"executed","note":"x"} {}`, 400, "the body must hold one JSON object, nothing after it"},
		{``, 400, "the body must be one JSON resolve request: EOF"},
	} {
		code, _, body := adminDo(t, h, "POST", "/resolve", tt.body, true)
		assert.Equal(t, tt.status, code, tt.body)
		assert.JSONEq(t, problemJSON(tt.status, tt.detail), body, tt.body)
	}
	assert.Equal(t, keystore.StatePending, e.record("k-pending").State, "a refused resolve writes nothing")
	assert.Equal(t, keystore.StateManual, e.record("k-manual").State)

	e.clock.Advance(time.Minute)
	code, _, body := adminDo(t, h, "POST", "/resolve", `{"intent":"order-2","verdict":"executed","note":"ops: charge ch_9 found, ticket 7",
		"response":{"status":201,"header":{"Content-Type":["application/json"],"Authorization":["Bearer x"]},"body":"{\"id\":\"ch_9\"}"}}`, true)
	require.Equal(t, 200, code, body)
	rec := e.record("k-manual")
	assert.Equal(t, keystore.StateSucceeded, rec.State)
	assert.Equal(t, keystore.ReasonExecuted, rec.Reason)
	assert.Equal(t, "ops: charge ch_9 found, ticket 7", rec.Note)
	assert.Equal(t, &keystore.Response{StatusCode: 201, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"id":"ch_9"}`)}, rec.Response)
	assert.Equal(t, adminNow.Add(time.Minute), rec.UpdatedAt)
	want, _ := json.Marshal(rec)
	assert.JSONEq(t, string(want), body)
	assert.Equal(t, int64(1), e.c.Stats().ResolvedByCaller)

	// The intent now answers from the record: the charge the operator found.
	res, err := e.c.Do(context.Background(), idem.NewOperation(http.MethodPost, "/v1/payments", rec.Request.Body, idem.WithIntent("order-2")))
	require.NoError(t, err)
	assert.Equal(t, 201, res.StatusCode)
	assert.Equal(t, `{"id":"ch_9"}`, string(res.Body))
	assert.Equal(t, 0, e.srv.Attempts(), "nothing was sent")

	code, _, body = adminDo(t, h, "POST", "/resolve", `{"key":"k-manual","verdict":"not_executed","note":"again"}`, true)
	assert.Equal(t, 409, code)
	assert.JSONEq(t, problemJSON(409, `key "k-manual": record is succeeded; only a manual record can be resolved`), body)
}

// nulRefusingStore refuses a note holding a NUL byte, as pgstore does (PostgreSQL text
// cannot hold one).
type nulRefusingStore struct{ keystore.Store }

func (s nulRefusingStore) Update(ctx context.Context, rec *keystore.Record) error {
	if strings.Contains(rec.Note, "\x00") {
		return errors.Join(keystore.ErrInvalid, errors.New("note holds a NUL byte"))
	}
	return s.Store.Update(ctx, rec)
}

// A resolution the keystore cannot hold is the request's fault: 400 with the store's reason,
// not a 500, and the record stays manual.
func TestAdminResolveStoreRefusesNote(t *testing.T) {
	e := adminEnv(t)
	c, err := idem.NewClient(idem.Config{BaseURL: e.srv.URL, Store: nulRefusingStore{e.store}, Now: e.clock.Now})
	require.NoError(t, err)
	defer c.Close()
	h := NewHandler(c, Options{Authorize: tokenAuth})
	code, _, body := adminDo(t, h, "POST", "/resolve", `{"key":"k-manual","verdict":"not_executed","note":"ops\u0000ticket 7"}`, true)
	assert.Equal(t, 400, code)
	assert.JSONEq(t, problemJSON(400, "the keystore cannot hold this resolution: idem: persisting the resolution of key \"k-manual\": "+
		"keystore: invalid record\nnote holds a NUL byte"), body)
	assert.Equal(t, keystore.StateManual, e.record("k-manual").State)
}

// Values of the request quoted back in a problem's detail are clipped to 200 bytes, their
// length said: a 600 KB key makes no 600 KB answer.
func TestAdminClipsEchoedInput(t *testing.T) {
	e := adminEnv(t)
	h := NewHandler(e.c, Options{Authorize: tokenAuth})
	long := strings.Repeat("k", 600000)
	clipped := `"` + strings.Repeat("k", 200) + `"… (600000 bytes)`
	// A clip never splits a character: 199 bytes of "k" and a 2-byte "é" keep 199 bytes.
	multi := strings.Repeat("k", 199) + strings.Repeat("é", 1000)
	for _, tt := range []struct {
		method, target, body string
		status               int
		detail               string
	}{
		{"GET", "/record?key=" + long, "", 404, `no record for key ` + clipped + ` in tenant ""`},
		{"GET", "/record?intent=" + long + "&tenant=" + long, "", 404, `no record for intent ` + clipped + ` in tenant ` + clipped},
		{"GET", "/record?key=" + url.QueryEscape(multi), "", 404,
			`no record for key "` + strings.Repeat("k", 199) + `"… (2199 bytes) in tenant ""`},
		{"POST", "/resolve", `{"key":"` + long + `","verdict":"executed","note":"x"}`, 404,
			`no record for key ` + clipped + ` in tenant ""`},
		{"POST", "/resolve", `{"key":"k-manual","verdict":"` + long + `","note":"x"}`, 400,
			`verdict ` + clipped + `: want "executed" or "not_executed"`},
		{"POST", "/resolve", `{"key":"k-manual","verdict":"executed","note":"x","` + long + `":1}`, 400,
			`the body must be one JSON resolve request: json: unknown field "` + strings.Repeat("k", 179) + `… (600022 bytes)`},
		{"GET", "/records?state=" + long, "", 400, `unknown state ` + clipped + ` (pending, succeeded, failed, manual)`},
		{"GET", "/records?min_age=" + long, "", 400, `min_age ` + clipped + ` is not a non-negative duration such as 10m`},
		{"GET", "/records?limit=" + long, "", 400, `limit ` + clipped + ` must be a whole number, 1 to 100`},
		{"GET", "/records?after=" + long, "", 400, `after ` + clipped + ` is not a next_after value of this endpoint, or comes with an offset`},
		{"GET", "/" + long, "", 404, `no admin endpoint "/` + strings.Repeat("k", 199) + `"… (600001 bytes) (records, record, resolve, recover, stats)`},
	} {
		code, _, body := adminDo(t, h, tt.method, tt.target, tt.body, true)
		what := (tt.target + " " + tt.body)[:40]
		assert.Equal(t, tt.status, code, what)
		assert.JSONEq(t, problemJSON(tt.status, tt.detail), body, what)
		assert.Less(t, len(body), 1000, what)
	}
}

func TestAdminResolveNotExecuted(t *testing.T) {
	e := adminEnv(t)
	h := NewHandler(e.c, Options{Authorize: tokenAuth})
	code, _, body := adminDo(t, h, "POST", "/resolve", `{"key":"k-manual","verdict":"not_executed","note":"no charge in the dashboard"}`, true)
	require.Equal(t, 200, code, body)
	rec := e.record("k-manual")
	assert.Equal(t, keystore.StateFailed, rec.State)
	assert.Equal(t, keystore.ReasonNotExecuted, rec.Reason)
	assert.Equal(t, "no charge in the dashboard", rec.Note)
	_, err := e.c.Do(context.Background(), idem.NewOperation(http.MethodPost, "/v1/payments", rec.Request.Body, idem.WithIntent("order-2")))
	assert.ErrorIs(t, err, idem.ErrNotExecuted)
}

// A cross-site form can POST a JSON-looking text/plain body with the operator's cookies:
// resolve takes only application/json, and the record stays manual.
func TestAdminResolveNeedsJSONContentType(t *testing.T) {
	e := adminEnv(t)
	h := NewHandler(e.c, Options{Authorize: tokenAuth})
	for _, ct := range []string{"text/plain", "", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"} {
		req := httptest.NewRequest("POST", "/resolve", strings.NewReader(`{"key":"k-manual","verdict":"not_executed","note":"x`+"="+`y"}`))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		req.Header.Set("Authorization", adminToken)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		assert.Equal(t, http.StatusUnsupportedMediaType, w.Code, "Content-Type %q", ct)
	}
	assert.Equal(t, keystore.StateManual, e.record("k-manual").State)
	code, _, body := adminDo(t, h, "POST", "/resolve", `{"key":"k-manual","verdict":"not_executed","note":"checked"}`, true)
	require.Equal(t, 200, code, body) // application/json (adminDo); a charset parameter is fine too
}

// The oldest ages are null when no record is in that state, and 0 for a record created now:
// the two are told apart.
func TestAdminRecordStatsOldestNone(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		recs []*keystore.Record
		want string
	}{
		{"empty", nil, `{"total":0,"damaged":0,"tenants":0,"oldest_pending_seconds":null,"oldest_manual_seconds":null,
			"by_state":{"pending":0,"manual":0,"succeeded":0,"failed":0}}`},
		{"pending created now, no manual", []*keystore.Record{
			{Scope: "a", Key: "k1", State: keystore.StatePending, CreatedAt: now},
			{Scope: "a", Key: "k2", State: keystore.StateFailed, CreatedAt: now.Add(-time.Hour)}},
			`{"total":2,"damaged":0,"tenants":1,"oldest_pending_seconds":0,"oldest_manual_seconds":null,
			"by_state":{"pending":1,"manual":0,"succeeded":0,"failed":1}}`},
		{"oldest of several", []*keystore.Record{
			{Scope: "a", Key: "k1", State: keystore.StateManual, CreatedAt: now.Add(-5 * time.Second)},
			{Scope: "b", Key: "k2", State: keystore.StateManual, CreatedAt: now.Add(-90 * time.Second)},
			{Scope: "b", Key: "k3", State: keystore.StateManual, CreatedAt: now}},
			`{"total":3,"damaged":0,"tenants":2,"oldest_pending_seconds":null,"oldest_manual_seconds":90,
			"by_state":{"pending":0,"manual":3,"succeeded":0,"failed":0}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(ComputeRecordStats(tc.recs, now))
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(b))
		})
	}
}

func TestAdminRecoverAndStats(t *testing.T) {
	e := adminEnv(t)
	var mu sync.Mutex
	var handed []string
	h := NewHandler(e.c, Options{Authorize: tokenAuth, OnReconciled: func(r idem.Reconciled) {
		mu.Lock()
		defer mu.Unlock()
		handed = append(handed, r.Record.Scope+"/"+r.Record.Key)
	}})

	code, _, body := adminDo(t, h, "GET", "/stats", "", true)
	require.Equal(t, 200, code, body)
	var st struct {
		Client  map[string]int64 `json:"client"`
		Records RecordStats      `json:"records"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Equal(t, RecordStats{Total: 4, Tenants: 2, OldestPendingSeconds: new(int64(7200)), OldestManualSeconds: new(int64(30 * 3600)),
		ByState: map[keystore.State]int{"pending": 2, "manual": 1, "succeeded": 1, "failed": 0}}, st.Records)
	assert.Len(t, st.Client, reflect.TypeFor[idem.Stats]().NumField(), "every counter of Stats")
	assert.Equal(t, int64(0), st.Client["calls"])
	assert.Contains(t, st.Client, "status_checks", "the renamed counter keeps its JSON name")
	assert.NotContains(t, st.Client, "key_status_checks")

	code, _, body = adminDo(t, h, "POST", "/recover", "", true)
	require.Equal(t, 200, code, body)
	var out struct {
		Report  map[string]int `json:"report"`
		Records []struct {
			Record Record `json:"record"`
			Error  string `json:"error"`
		} `json:"records"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &out))
	// k-ok is 100 h old, past the 72 h Retention: purged. Both pending records are sent once
	// (the API never saw their keys) and succeed.
	assert.Equal(t, map[string]int{"pending": 2, "skipped": 0, "succeeded": 2, "failed": 0, "manual": 0,
		"unknown": 0, "purged": 1, "resolved": 0}, out.Report)
	require.Len(t, out.Records, 2)
	for i, key := range []string{"k-pending", "k-acme"} {
		assert.Equal(t, key, out.Records[i].Record.Key)
		assert.Equal(t, keystore.StateSucceeded, out.Records[i].Record.State)
		assert.Empty(t, out.Records[i].Error)
	}
	assert.ElementsMatch(t, []string{"/k-pending", "acme/k-acme"}, handed)
	assert.Equal(t, 2, e.srv.Attempts())
	assert.Equal(t, keystore.StateSucceeded, e.record("k-pending").State)

	code, _, body = adminDo(t, h, "GET", "/stats", "", true)
	require.Equal(t, 200, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Equal(t, map[keystore.State]int{"pending": 0, "manual": 1, "succeeded": 2, "failed": 0}, st.Records.ByState)
	assert.Equal(t, int64(2), st.Client["recovered"])
	assert.Equal(t, int64(2), st.Client["attempts"])
}

// Pages ended by a cursor joining scope and key with NUL: ("a\x00b", "c") and
// ("a", "b\x00c"), created at the same instant, were one place, and the page after the first
// skipped the second (adversarial run). Each record is listed once, page by page.
func TestAdminRecordsCursorKeepsScopeAndKeyApart(t *testing.T) {
	store := keystore.NewMemory()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, sk := range [][2]string{{"a\x00b", "c"}, {"a", "b\x00c"}, {"a", "b"}, {"", "a\x00bc"}} {
		require.NoError(t, store.Create(context.Background(), &keystore.Record{Scope: sk[0], Key: sk[1], Fingerprint: "f",
			Request: keystore.Request{Method: "POST", URL: "/v1/p"}, State: keystore.StatePending, CreatedAt: at, UpdatedAt: at}))
	}
	c, err := idem.NewClient(idem.Config{BaseURL: "http://127.0.0.1:1", Store: store, Now: func() time.Time { return at.Add(time.Hour) }})
	require.NoError(t, err)
	defer c.Close()
	h := NewHandler(c, Options{Authorize: func(*http.Request) error { return nil }})
	var seen []string
	q := url.Values{"limit": {"1"}}
	for range 10 {
		code, _, body := adminDo(t, h, "GET", "/records?"+q.Encode(), "", true)
		require.Equal(t, 200, code, body)
		var page struct {
			Records []Record `json:"records"`
			Next    string   `json:"next_after"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &page))
		for _, r := range page.Records {
			seen = append(seen, r.Scope+"|"+r.Key)
		}
		if page.Next == "" {
			break
		}
		q.Set("after", page.Next)
	}
	assert.Equal(t, []string{"|a\x00bc", "a|b", "a|b\x00c", "a\x00b|c"}, seen)
}
