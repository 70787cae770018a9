package idemserver

import (
	"context"
	"net/http"
	"time"
)

// completeTimeout bounds the store's write of an answer (time.Duration): that write no longer
// ends with the request's context.
const completeTimeout = 30 * time.Second

// complete stores rec's answer (its Config.StoredHeaders only) as the claim's key answer,
// with ctx detached from the request: once the handler ran, its answer is stored even if the
// client went away (a panic often follows that, http.ErrAbortHandler). rec is left as it was,
// for the caller to send and to store again should this fail (keepFailed).
func (m *Middleware) complete(ctx context.Context, claim Claim, rec *recorder) (*Response, error) {
	dctx := detachedTimeout(ctx, completeTimeout)
	defer dctx.stop()
	resp := rec.response()
	// The stored answer is handed to the backend (Claim.Complete), which may keep it as it
	// is: its header values are copied (into one slice, as http.Header.Clone does), since the
	// recorder's go on to the ResponseWriter, where an outer handler may change them. Only
	// keepFailed's rare answers come here; the handler's own go through completeHandingOver.
	stored := &Response{StatusCode: resp.StatusCode, Header: make(http.Header, len(m.cfg.StoredHeaders)), Body: resp.Body}
	n := 0
	for _, h := range m.cfg.StoredHeaders {
		n += len(rec.header[h])
	}
	values := make([]string, 0, n)
	for _, h := range m.cfg.StoredHeaders {
		if vs, ok := rec.header[h]; ok {
			values = append(values, vs...)
			stored.Header[h] = values[len(values)-len(vs) : len(values) : len(values)]
		}
	}
	now := m.cfg.Now()
	return stored, claim.Complete(dctx, stored, now, now.Add(m.cfg.Retention))
}

// completeHandingOver is complete for the handler's own answer, stored once: the recorder's
// header map itself becomes the stored answer's header, once the fields outside
// Config.StoredHeaders are taken out of it, and ex.sent receives what the client is sent,
// the stored fields' values copied. The stored answer so costs no map of its own (a small map
// and its slots were two allocations, some 400 bytes), and the stored and the sent values still
// share nothing, as an outer handler may change those it is sent. After it, ex.rec's header
// belongs to the backend: send ex.sent.fields.
func (m *Middleware) completeHandingOver(ctx context.Context, claim Claim, ex *execution) (*Response, error) {
	dctx := &ex.store
	dctx.start(ctx, completeTimeout)
	defer dctx.stop()
	rec, sent := &ex.rec, &ex.sent
	resp := rec.response()
	n := 0
	for k, vs := range rec.header {
		if m.storedHeader(k) {
			n += len(vs)
		}
	}
	var values []string
	if n <= len(sent.values) {
		values = sent.values[:0:n]
	} else {
		values = make([]string, 0, n)
	}
	sent.fields = sent.buf[:0]
	for k, vs := range rec.header {
		switch {
		case !m.storedHeader(k):
			sent.fields = append(sent.fields, field{k, vs}) // sent as it is, not stored
			delete(rec.header, k)                           // deleting during range is allowed
		case vs == nil:
			sent.fields = append(sent.fields, field{k, nil}) // nil: net/http adds no such header
		default:
			values = append(values, vs...)
			sent.fields = append(sent.fields, field{k, values[len(values)-len(vs) : len(values) : len(values)]})
		}
	}
	stored := &Response{StatusCode: resp.StatusCode, Header: rec.header, Body: resp.Body}
	now := m.cfg.Now()
	return stored, claim.Complete(dctx, stored, now, now.Add(m.cfg.Retention))
}

// storedHeader reports whether the header field named name (as the handler keyed it) is one
// of Config.StoredHeaders.
func (m *Middleware) storedHeader(name string) bool {
	for _, h := range m.cfg.StoredHeaders {
		if h == name {
			return true
		}
	}
	return false
}

// field is one header field of an answer: its name and its values.
type field struct {
	name   string
	values []string
}

// sentHeader is the header fields of an answer as the client is sent them
// (completeHandingOver), in buf and values when they are few.
type sentHeader struct {
	fields []field
	buf    [3]field
	values [2]string
}
