package idem

import (
	"fmt"
	"strings"

	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/keystore"
)

// DamagedRecordsError is returned by Recover, after it reconciled every other pending record,
// when the keystore holds records that cannot be decoded. They are left untouched (a person
// or a repair tool must look at them); each was also reported to Hooks.OnDamagedRecord and
// counted in Stats.DamagedRecords. Match it with errors.As.
type DamagedRecordsError struct {
	Records []keystore.DamagedRecord // the skipped records, in store order
}

// Error lists the scope and key of every skipped record.
func (e *DamagedRecordsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "idem: %d keystore records cannot be decoded and were skipped:", len(e.Records))
	for i, r := range e.Records {
		if i == 20 {
			fmt.Fprintf(&b, " and %d more", len(e.Records)-i)
			break
		}
		fmt.Fprintf(&b, " (%q, %q)", r.Scope, r.Key)
	}
	return b.String()
}

// onDamaged counts, logs and reports the damaged records of a page and returns them.
func (c *Client) onDamaged(recs []keystore.DamagedRecord) []keystore.DamagedRecord {
	for _, r := range recs {
		c.stats.damaged.Add(1)
		if l := c.cfg.Logger; l != nil {
			l.Warn("idem damaged keystore record skipped", "scope", r.Scope, "key", r.Key, "error", r.Err)
		}
		if h := c.cfg.Hooks.OnDamagedRecord; h != nil {
			h(event.DamagedRecord{Scope: r.Scope, Key: r.Key, Err: r.Err})
		}
	}
	return recs
}
