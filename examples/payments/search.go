package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem/keystore"
)

// The -target oracle per business payment: the API's own search by reference.

// errNoSearch: the API offers no search by reference.
var errNoSearch = errors.New("no search by reference")

// searchRef lists the ids of the tenant's charges with reference ref that are not canceled,
// oldest first.
func (c *statusClient) searchRef(ctx context.Context, ref string) ([]string, error) {
	if c.search == "" || c.noSearch {
		return nil, errNoSearch
	}
	if c.down {
		return nil, errors.New("the API is unreachable")
	}
	target := c.base + strings.ReplaceAll(c.search, "{reference}", url.QueryEscape(ref))
	req, err := newGet(ctx, target)
	if err != nil {
		return nil, err
	}
	var last error
	transportOnly := true
	for try := 0; try < statusTries; try++ {
		if try > 0 {
			time.Sleep(time.Duration(try) * 50 * time.Millisecond)
		}
		resp, body, err := c.fetch(req)
		if resp != nil {
			transportOnly = false
		}
		switch {
		case err != nil:
			last = err
			continue
		case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotFound ||
			resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented:
			c.noSearch = true
			return nil, errNoSearch
		case resp.StatusCode != http.StatusOK:
			last = fmt.Errorf("HTTP %d", resp.StatusCode)
			continue
		}
		var list struct {
			Data []struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &list); err != nil || list.Data == nil {
			return nil, fmt.Errorf("no data list in %.80q", body)
		}
		ids := make([]string, 0, len(list.Data))
		for _, d := range list.Data {
			if d.Status != "canceled" { // counted net of cancels
				ids = append(ids, d.ID)
			}
		}
		return ids, nil
	}
	if transportOnly {
		c.down = true // unreachable: later payments get one try each
	}
	return nil, last
}

// allNotExecuted reports whether every record of a payment is known never executed.
func allNotExecuted(rs []*keystore.Record) bool {
	for _, r := range rs {
		if !notExecuted(r) {
			return false
		}
	}
	return true
}
