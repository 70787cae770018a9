package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/keystore"
)

// adminBackend talks to a running service's admin handler (idemadmin.NewHandler): the way to
// reach a keystore whose file the service holds locked, or a fleet's shared database through
// a service's own client (its credentials, status endpoint and lookup).
type adminBackend struct {
	base   *url.URL
	header string
	token  string
	http   *http.Client // every endpoint but POST /recover: the answer's wait is bounded
	slow   *http.Client // POST /recover: the answer comes when the Recover run ends
}

func newAdminBackend(c *common) (*adminBackend, error) {
	u, err := url.Parse(c.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Sprintf("-url %q is not an absolute http(s) URL", c.url)}
	}
	token, err := secretFromEnv("-token-env", c.tokenEnv)
	if err != nil {
		return nil, err
	}
	// -timeout bounds the connection (dial, TLS handshake) and the wait for an answer's
	// headers, as it bounds the wait for a file lock or a database: an admin URL that
	// accepts and never answers ends the command instead of hanging it. POST /recover
	// answers only when its Recover run ends, so it waits for the answer as long as it takes.
	wait := adminWait
	if c.timeoutSet {
		wait = c.timeout
	}
	dialer := &net.Dialer{Timeout: wait}
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, DialContext: dialer.DialContext, TLSHandshakeTimeout: wait}
	quick := tr.Clone()
	quick.ResponseHeaderTimeout = wait
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &adminBackend{base: u, header: c.tokenHeader, token: token,
		http: &http.Client{Transport: quick, CheckRedirect: noRedirect},
		slow: &http.Client{Transport: tr, CheckRedirect: noRedirect}}, nil
}

// adminWait is -timeout's default with -url: a listing of a large keystore takes a while to
// start, where a file lock is either free at once or held by a running service.
const adminWait = 30 * time.Second

func (b *adminBackend) close() error { return nil }

// do sends one request to path (relative to the admin URL) and decodes a 200 answer into out.
// Any other answer becomes an error carrying the problem's detail.
func (b *adminBackend) do(ctx context.Context, method, path string, q url.Values, body any, out any) error {
	u := b.base.JoinPath(path)
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if b.token != "" {
		req.Header.Set(b.header, b.token)
	}
	hc := b.http
	if path == "recover" {
		hc = b.slow
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin endpoint: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin endpoint: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var p struct {
			Detail string `json:"detail"`
		}
		if json.Unmarshal(data, &p) != nil || p.Detail == "" {
			p.Detail = strings.TrimSpace(string(data))
		}
		err := fmt.Errorf("admin endpoint answered %s: %s", resp.Status, p.Detail)
		switch {
		case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(p.Detail, "no record"):
			err = fmt.Errorf("%w: %s", errNotFound, p.Detail)
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
			// Not the admin handler's own answer: the URL misses the path it is mounted under.
			err = fmt.Errorf("%w (is -url the path the admin handler is mounted under, such as http://host:port/idem?)", err)
		}
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("admin endpoint: the answer is not the JSON expected (is -url the admin handler?): %w", err)
	}
	return nil
}

func (b *adminBackend) list(ctx context.Context, f listFilter) ([]idemadmin.Record, []damagedRow, error) {
	q := url.Values{}
	if len(f.states) > 0 {
		s := make([]string, len(f.states))
		for i, st := range f.states {
			s[i] = string(st)
		}
		q.Set("state", strings.Join(s, ","))
	}
	if f.minAge > 0 {
		q.Set("min_age", f.minAge.String())
	}
	if f.tenant != nil {
		q.Set("tenant", *f.tenant)
	}
	out := []idemadmin.Record{}
	var damaged []damagedRow
	// Page by page, each after the last record of the one before (next_after): a record
	// settled between two pages shifts no other out of the listing, as an offset would.
	for first := true; ; first = false {
		var page struct {
			Records   []idemadmin.Record `json:"records"`
			NextAfter string             `json:"next_after"`
			Damaged   []damagedRow       `json:"damaged"`
		}
		if err := b.do(ctx, http.MethodGet, "records", q, nil, &page); err != nil {
			return nil, nil, err
		}
		out = append(out, page.Records...)
		if first {
			damaged = page.Damaged // every page names the same damaged records
		}
		if f.limit > 0 && len(out) >= f.limit { // oldest first: the rest are younger
			return out[:f.limit], damaged, nil
		}
		if page.NextAfter == "" || page.NextAfter == q.Get("after") {
			return out, damaged, nil
		}
		q.Set("after", page.NextAfter)
	}
}

func (b *adminBackend) get(ctx context.Context, tenant, key, intent string) (*keystore.Record, error) {
	q := url.Values{"tenant": {tenant}}
	if intent != "" {
		q.Set("intent", intent)
	} else {
		q.Set("key", key)
	}
	var rec keystore.Record
	if err := b.do(ctx, http.MethodGet, "record", q, nil, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

func (b *adminBackend) stats(ctx context.Context) (statsOut, error) {
	var out statsOut
	err := b.do(ctx, http.MethodGet, "stats", nil, nil, &out)
	return out, err
}

func (b *adminBackend) purge(context.Context, time.Time, bool) (int, []damagedRow, error) {
	return 0, nil, usageError{"purge works on -db or -dsn; a running service purges old records in Recover (idemctl recover -url)"}
}

func (b *adminBackend) resolve(ctx context.Context, req idemadmin.ResolveRequest) (*keystore.Record, error) {
	var rec keystore.Record
	if err := b.do(ctx, http.MethodPost, "resolve", nil, req, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

func (b *adminBackend) recover(ctx context.Context, rc recoverFlags) (recoverOut, error) {
	if rc.baseURL != "" || rc.statusPath != "" || rc.keyHeader != "" || rc.auth != "" || rc.lookup != "" || rc.retention != 0 {
		return recoverOut{}, usageError{"with -url the service's own client configuration applies: drop -base-url, -status-path, -key-header, -auth-env, -lookup and -retention"}
	}
	var out recoverOut
	err := b.do(ctx, http.MethodPost, "recover", nil, nil, &out)
	return out, err
}
