// Package idemadmin is the operator's view of an idem client's keystore over HTTP: a handler
// a service mounts on its admin port, so that stuck payments (pending for long, or manual)
// can be listed, shown and settled while the service holds its keystore. cmd/idemctl's -url
// target speaks to it. It imports idem and is never imported by it.
package idemadmin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// Options configure NewHandler.
type Options struct {
	// Authorize decides whether a request may use the handler; a non-nil error refuses it
	// with 401 and the error's text as the problem's detail (so it must not echo a
	// credential). Required: without it every request is refused with 403. It runs before
	// anything else, for every path and method, so that an unauthorised caller learns nothing
	// (not even which paths exist). If it trusts a browser's cookies, it must also stop
	// cross-site requests (a CSRF token, an Origin check): POST /recover has no body to
	// guard it. POST /resolve takes only Content-Type: application/json (415 otherwise),
	// which a cross-site form cannot send.
	Authorize func(*http.Request) error
	// OnReconciled is handed every outcome of a Recover run started with POST /recover (see
	// idem.Client.Recover's handle): set it to the function the service passes to Recover at
	// start-up, so that an order settled from the admin port is marked like any other. Nil:
	// outcomes are only returned in the response.
	OnReconciled func(idem.Reconciled)
	// MaxLimit caps the page size of GET /records. Default DefaultLimit.
	MaxLimit int
}

// DefaultLimit is the default and largest page size of GET /records unless
// Options.MaxLimit says otherwise.
const DefaultLimit = 100

// maxAdminBody bounds a request body of the admin handler (1 MiB).
const maxAdminBody = 1 << 20

// NewHandler returns the operator's view of c's keystore as JSON over HTTP. It serves
// these paths, relative to where it is mounted (mount it under a prefix with http.StripPrefix):
//
//	GET  /records?state=pending,manual&min_age=10m&tenant=T&limit=100&after=C (or &offset=N)
//	     records oldest first, without bodies; "tenant" absent means every tenant.
//	     {"records":[...],"total":N,"next_after":C,"next_offset":N,"damaged":[{"tenant":T,"key":K,"error":E}...]}
//	     (next_after and next_offset only when more follow: pass after=next_after for the
//	     next page, which a record settled between pages does not shift as it shifts an
//	     offset); records the store cannot decode are skipped,
//	     left untouched and listed under "damaged" (boltstore, pgstore)
//	GET  /record?tenant=T&key=K   or   /record?tenant=T&intent=I
//	     one record as keystore.Record's JSON (bodies base64, as encoding/json writes []byte)
//	POST /resolve  {"tenant":"","key":"K" or "intent":"I","verdict":"executed"|"not_executed",
//	                "note":"who and why (required)","response":{"status":200,"header":{},"body":"text"}}
//	     settles a manual record through idem.Client.Resolve; answers the record as persisted
//	POST /recover  runs idem.Client.Recover now; answers {"report":{...},"records":[...],
//	     "damaged":[{"tenant":T,"key":K,"error":E}...]}: records it could not decode are
//	     skipped and listed there (200), every other one reconciled
//	GET  /stats    {"client":{...Client.Stats},"records":{"total":N,"by_state":{...},...}}
//	     records is RecordStats: oldest_pending_seconds and oldest_manual_seconds are
//	     null when no record is in that state; damaged counts the records skipped as above
//
// Errors are RFC 9457 problem documents (application/problem+json): 403 when there is no
// Authorize function, 401 when it refuses, 415 for a resolve body not sent as
// application/json, 400 for bad input (an unknown state, a bad
// duration or number, unknown JSON fields, a body over 1 MiB, a resolution the keystore
// refuses as keystore.ErrInvalid, such as a note with a NUL byte on pgstore), 404 for an unknown path or
// record, 405 with an Allow header for a wrong method, 409 when the record to resolve is not
// manual or a Recover started here is still running, 503 when this host's clock is too far
// off the store's to write a verdict (idem.ErrClockSkew), 500 when the keystore fails or c is nil
// or zero (not made by NewClient). A detail quotes a request's value (a key, a tenant, a
// path) only up to its first 200 bytes, followed by "… (N bytes)".
//
// Records never hold credentials (idem strips Authorization, Cookie, Proxy-Authorization,
// Config.SecretHeaders and Set-Cookie before persisting); the handler strips the same headers
// again on output, so a keystore written by something else leaks none either. It does show
// request and response bodies: put it behind the service's admin authentication.
func NewHandler(c *idem.Client, opts Options) http.Handler {
	if opts.MaxLimit <= 0 {
		opts.MaxLimit = DefaultLimit
	}
	return &adminHandler{c: c, opts: opts}
}

type adminHandler struct {
	c          *idem.Client
	opts       Options
	recovering sync.Mutex
}

type adminRoute struct {
	method string
	serve  func(*adminHandler, http.ResponseWriter, *http.Request)
}

var adminRoutes = map[string]adminRoute{
	"/records": {http.MethodGet, (*adminHandler).list},
	"/record":  {http.MethodGet, (*adminHandler).show},
	"/resolve": {http.MethodPost, (*adminHandler).resolve},
	"/recover": {http.MethodPost, (*adminHandler).recoverNow},
	"/stats":   {http.MethodGet, (*adminHandler).stats},
}

func (h *adminHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.opts.Authorize == nil {
		problem(w, http.StatusForbidden, "the admin handler has no Authorize function: every request is refused")
		return
	}
	if err := h.opts.Authorize(r); err != nil {
		problem(w, http.StatusUnauthorized, "unauthorized: "+err.Error())
		return
	}
	route, ok := adminRoutes[r.URL.Path]
	if !ok {
		problem(w, http.StatusNotFound, fmt.Sprintf("no admin endpoint %s (records, record, resolve, recover, stats)", quoteInput(r.URL.Path)))
		return
	}
	if r.Method != route.method && !(route.method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", route.method)
		problem(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s takes %s, not %s", r.URL.Path, route.method, r.Method))
		return
	}
	if h.c == nil || h.c.Store() == nil {
		problem(w, http.StatusInternalServerError, "the admin handler has a nil or zero *idem.Client; create it with NewClient")
		return
	}
	route.serve(h, w, r)
}

// problem writes an RFC 9457 problem document.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail})
}

// maxEchoed bounds the bytes of a request's value (a key, a tenant, a path) that a problem
// detail quotes back: a 600 KB key makes no 600 KB answer.
const maxEchoed = 200

// quoteInput is s quoted as %q quotes it; beyond maxEchoed bytes, its first ones (whole
// characters) followed by "… (N bytes)", N being the length of s.
func quoteInput(s string) string {
	if len(s) <= maxEchoed {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:clipAt(s)]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// clipInput is text that may hold a request's value (a decoder's error naming a JSON field),
// clipped as quoteInput clips, unquoted.
func clipInput(s string) string {
	if len(s) <= maxEchoed {
		return s
	}
	return s[:clipAt(s)] + fmt.Sprintf("… (%d bytes)", len(s))
}

// clipAt is where to cut s (longer than maxEchoed) so as not to split a UTF-8 character.
func clipAt(s string) int {
	cut := maxEchoed
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	return cut
}

func writeAdminJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// renamedCounters keeps the JSON names of the counters renamed after v0.1.0, so that what
// reads GET /stats keeps working.
var renamedCounters = map[string]string{"KeyStatusChecks": "status_checks"}

// snakeFields turns a struct of int64/int counters (idem.Stats, idem.RecoverReport) into a map keyed by
// the snake_case of each field name, so that the JSON reads like the rest of the handler's.
func snakeFields(v any) map[string]any {
	rv := reflect.ValueOf(v)
	out := make(map[string]any, rv.NumField())
	for i := range rv.NumField() {
		name := rv.Type().Field(i).Name
		if wire, ok := renamedCounters[name]; ok {
			name = wire
		} else {
			name = snake(name)
		}
		out[name] = rv.Field(i).Interface()
	}
	return out
}

func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
