package boltstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/idemkit/idem/keystore"
)

// bucketQuarantine keeps the damaged records an operator quarantined: scoped key ->
// checksum || JSON of a Quarantined (the damaged value kept byte for byte).
var bucketQuarantine = []byte("quarantine")

// ErrNotDamaged: Quarantine was asked to set aside a record that decodes; settle a sound
// manual record with the client's Resolve (idemctl resolve) instead.
var ErrNotDamaged = errors.New("boltstore: the record is not damaged")

// Quarantined is a damaged record set aside by Quarantine, as kept in the file.
type Quarantined struct {
	Scope    string    `json:"scope"`            // the damaged record's scope
	Key      string    `json:"key"`              // the key it was stored under
	Intent   string    `json:"intent,omitempty"` // the intent its index named, "" if none
	Executed bool      `json:"executed"`         // the operator's verdict
	Note     string    `json:"note"`             // who decided, on what evidence
	At       time.Time `json:"at"`               // when it was quarantined
	Value    []byte    `json:"value"`            // the damaged value, as it was stored
}

func decodeQuarantined(k, v []byte) (*Quarantined, error) {
	rest, err := unseal(k, v, fmt.Sprintf("quarantined record %q", clip(k)))
	if err != nil {
		return nil, err
	}
	var q Quarantined
	if err := json.Unmarshal(rest, &q); err != nil {
		return nil, fmt.Errorf("%w: quarantined record %q: %w", ErrCorrupt, clip(k), err)
	}
	return &q, nil
}

// Verdict is an operator's word on a damaged record, for Quarantine.
type Verdict struct {
	// Executed says whether the operation the record stood for was executed by the server
	// (the operator checked the provider's dashboard, a statement, the customer).
	Executed bool
	// Note says who decided and on what evidence; required.
	Note string
	// Now is the time written as the record's UpdatedAt; zero means time.Now().
	Now time.Time
}

// Quarantine sets aside the damaged record (scope, key), once an operator has said whether
// its operation was executed, in one durable commit: the damaged value is kept, byte for
// byte, in the "quarantine" bucket (Quarantine's result, and Verify, report it), and a sound
// record takes its place, settled as Resolve settles a manual record: executed makes it
// succeeded (an empty 200 answer, Reason "executed"), not executed makes it failed (Reason
// "not_executed"), so that the application may pay again under a new intent. The new record
// keeps its intent, taken from the intent indexes (or the damaged JSON when no index names
// the key), and whatever of the method, URL, fingerprint and times still parses; its intent
// is indexed afresh. Its intent is thus no longer blocked by the damage: a Do of it returns
// the verdict. When the damage is in the record's key itself (the damaged JSON names a key that
// an intent index names and that has no record), the new record goes under that key.
//
// Errors: keystore.ErrInvalid for an empty note; keystore.ErrNotFound if there is no record
// under (scope, key); ErrNotDamaged if it decodes; ErrCorrupt if its intent cannot be told
// (the indexes name it under two intents, or only the damaged JSON names an intent that is
// indexed to another key) or the pages are damaged; keystore.ErrExists if the key was
// quarantined before (the first entry is kept); keystore.ErrClosed,
// ctx.Err(), or the commit's I/O error. Nothing is written when it returns an error.
func (s *Store) Quarantine(ctx context.Context, scope, key string, v Verdict) (*keystore.Record, error) {
	if strings.TrimSpace(v.Note) == "" {
		return nil, errors.Join(keystore.ErrInvalid, errors.New("quarantine needs a note: who decided, on what evidence"))
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	now := v.Now
	if now.IsZero() {
		now = time.Now()
	}
	var out *keystore.Record
	err := s.commit.do(ctx, func(tx *bbolt.Tx) error {
		records := tx.Bucket(bucketRecords)
		k := scopedKey(scope, key)
		raw := records.Get(k)
		if raw == nil {
			return keystore.ErrNotFound
		}
		if _, _, err := decodeSealed(k, raw); err == nil {
			return fmt.Errorf("%w: (%q, %q) decodes; resolve it instead", ErrNotDamaged, scope, key)
		}
		parsed := parseDamaged(raw)
		// The damaged part may be the key under which the record is stored: then its JSON
		// names the true key, which an index names and no record holds.
		target := key
		if parsed.Scope == scope && parsed.Key != "" && parsed.Key != key &&
			records.Get(scopedKey(scope, parsed.Key)) == nil && len(intentsNaming(tx, scope, parsed.Key)) > 0 {
			target = parsed.Key
		}
		intents := intentsNaming(tx, scope, target)
		if len(intents) == 0 && parsed.Scope == scope && parsed.Key == target && parsed.Intent != "" {
			// Only the damaged JSON names this intent: it must not be another record's, whose
			// index entry the settled record would take over (and settle).
			other, found, err := lookupIntent(tx, scopedKey(scope, parsed.Intent))
			if err != nil {
				return err
			}
			if found && other != target {
				return fmt.Errorf("%w: the damaged record's intent %q is indexed to key %q: quarantining it would settle that record's intent; verify the file and decide by hand", ErrCorrupt, parsed.Intent, other)
			}
			intents = []string{parsed.Intent}
		}
		if len(intents) > 1 {
			return fmt.Errorf("%w: the intent indexes name (%q, %q) under several intents %q: rebuild the index first", ErrCorrupt, scope, target, intents)
		}
		rec := &keystore.Record{Scope: scope, Key: target, Fingerprint: parsed.Fingerprint,
			Request:   keystore.Request{Method: cmpOr(parsed.Request.Method, "POST"), URL: parsed.Request.URL},
			Attempts:  max(parsed.Attempts, 0),
			CreatedAt: parsed.CreatedAt, UpdatedAt: now,
			Note: v.Note + " [quarantined: the damaged record is kept in the keystore's quarantine]"}
		if rec.CreatedAt.IsZero() || rec.CreatedAt.After(now) {
			rec.CreatedAt = now
		}
		if len(intents) == 1 {
			rec.Intent = intents[0]
		}
		if v.Executed {
			rec.State, rec.Reason, rec.Response = keystore.StateSucceeded, "executed", &keystore.Response{StatusCode: 200}
		} else {
			rec.State, rec.Reason = keystore.StateFailed, "not_executed"
			rec.Error = "quarantined damaged record: an operator found it not executed"
		}
		value, err := s.codec.value(scopedKey(scope, target), rec)
		if err != nil {
			return err
		}
		q := Quarantined{Scope: scope, Key: key, Intent: rec.Intent, Executed: v.Executed, Note: v.Note, At: now, Value: raw}
		qj, err := json.Marshal(q)
		if err != nil {
			return abort(err)
		}
		qb, err := tx.CreateBucketIfNotExists(bucketQuarantine)
		if err != nil {
			return abort(err)
		}
		if qb.Get(k) != nil { // the first entry and its operator's verdict are kept
			return fmt.Errorf("%w: (%q, %q) was quarantined before, and its entry is kept: see Quarantined", keystore.ErrExists, scope, key)
		}
		if err := qb.Put(k, seal(k, qj)); err != nil {
			return abort(err)
		}
		if err := records.Delete(k); err != nil {
			return abort(err)
		}
		// The damaged record's pending index entry, if any, and any naming the target key:
		// the settled record needs none.
		if err := dropPendingEntries(tx, k); err != nil {
			return err
		}
		if err := dropPendingEntries(tx, scopedKey(scope, target)); err != nil {
			return err
		}
		if err := records.Put(scopedKey(scope, target), value); err != nil {
			return abort(err)
		}
		if rec.Intent != "" {
			if err := putIntent(tx, scopedKey(scope, rec.Intent), target); err != nil {
				return abort(err)
			}
		}
		s.summaries.drop(k)
		s.summaries.drop(scopedKey(scope, target))
		out = rec
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// parseDamaged reads what it can of a damaged record value: the record after the checksum
// and flags (binary or JSON, as the flags byte says), field by field as far as it parses.
// Nothing in it is trusted but as a hint.
func parseDamaged(v []byte) keystore.Record {
	var rec keystore.Record
	if len(v) > crcSize+1 {
		if v[crcSize]&flagBinary != 0 {
			if r, _ := decodeBinary(v[crcSize+1:], false); r != nil {
				rec = *r
				// A damaged value may hold any bytes; encoding/json, which read the
				// records of schema version 2, replaced invalid UTF-8 the same way, and a
				// record written back must be one Create would accept.
				for _, p := range []*string{&rec.Intent, &rec.Fingerprint, &rec.Request.Method, &rec.Request.URL, &rec.Reason, &rec.Error, &rec.Owner, &rec.Note} {
					*p = strings.ToValidUTF8(*p, "\uFFFD")
				}
			}
		} else {
			_ = json.Unmarshal(v[crcSize+1:], &rec)
		}
	}
	return rec
}

// intentsNaming returns the intents of scope that either index names as key's, sorted,
// each once; entries that do not check are ignored.
func intentsNaming(tx *bbolt.Tx, scope, key string) []string {
	var out []string
	add := func(ik []byte) {
		if sc, intent, ok := splitScopedKey(ik); ok && sc == scope && !slices.Contains(out, intent) {
			out = append(out, intent)
		}
	}
	_ = tx.Bucket(bucketIntents).ForEach(func(ik, v []byte) error {
		if name, err := unseal(ik, v, ""); err == nil && string(name) == key {
			add(ik)
		}
		return nil
	})
	_ = tx.Bucket(bucketIntentHash).ForEach(func(hk, v []byte) error {
		if ik, name, err := openIntentHash(hk, v); err == nil && string(name) == key {
			add(ik)
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// Quarantined returns the records set aside by Quarantine, in key order. Errors: ErrCorrupt
// for a quarantined entry that does not check, keystore.ErrClosed, ctx.Err().
func (s *Store) Quarantined(ctx context.Context) ([]*Quarantined, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var out []*Quarantined
	err := s.view(func(tx *bbolt.Tx) error {
		out = nil
		b := tx.Bucket(bucketQuarantine)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			q, err := decodeQuarantined(k, v)
			if err != nil {
				return err
			}
			out = append(out, q)
			return nil
		})
	})
	return out, s.commit.note(dbError(err))
}

// RebuildIntentIndex rebuilds both intent indexes, and the pending index (index.go), from the
// records, in one durable commit, and returns how many intents it indexed. It refuses (ErrCorrupt, writing nothing) while a
// record does not decode, two records claim one intent, or an index entry names a key that
// has no record: a record whose key is damaged would otherwise lose its intent's entry, and
// that intent would be paid again; Quarantine such records first. Other errors:
// keystore.ErrClosed, ctx.Err(), or the commit's I/O error.
func (s *Store) RebuildIntentIndex(ctx context.Context) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	n := 0
	err := s.commit.do(ctx, func(tx *bbolt.Tx) error {
		n = 0
		owner := map[string]string{} // scoped intent -> key
		var bad []string
		err := forEachRecord(tx.Bucket(bucketRecords), func(k, v []byte) error {
			rec, _, err := decodeSealed(k, v)
			if err != nil {
				if _, ok := errors.AsType[*structuralError](err); ok {
					return err
				}
				bad = append(bad, fmt.Sprintf("record %q: %v", clip(k), err))
				return nil
			}
			if rec.Intent == "" {
				return nil
			}
			ik := string(scopedKey(rec.Scope, rec.Intent))
			if other, ok := owner[ik]; ok {
				bad = append(bad, fmt.Sprintf("intent %q of scope %q is held by keys %q and %q", rec.Intent, rec.Scope, other, rec.Key))
			}
			owner[ik] = rec.Key
			return nil
		})
		if err != nil {
			return err
		}
		check := func(ik []byte, key string) {
			if sc, _, ok := splitScopedKey(ik); ok && tx.Bucket(bucketRecords).Get(scopedKey(sc, key)) == nil {
				bad = append(bad, fmt.Sprintf("index entry %q names key %q, which has no record (a damaged record key?)", clip(ik), key))
			}
		}
		_ = tx.Bucket(bucketIntents).ForEach(func(ik, v []byte) error {
			if name, err := unseal(ik, v, ""); err == nil {
				check(ik, string(name))
			}
			return nil
		})
		_ = tx.Bucket(bucketIntentHash).ForEach(func(hk, v []byte) error {
			if ik, name, err := openIntentHash(hk, v); err == nil {
				check(ik, string(name))
			}
			return nil
		})
		if len(bad) > 0 {
			return fmt.Errorf("%w: the intent index is not rebuilt: %s", ErrCorrupt, strings.Join(bad, "; "))
		}
		for _, b := range [][]byte{bucketIntents, bucketIntentHash} {
			if err := tx.DeleteBucket(b); err != nil {
				return abort(err)
			}
			if _, err := tx.CreateBucket(b); err != nil {
				return abort(err)
			}
		}
		for ik, key := range owner {
			if err := putIntent(tx, []byte(ik), key); err != nil {
				return abort(err)
			}
			n++
		}
		// The pending index too: rebuilt from the same records (a damaged entry there hides
		// a record from ClaimExpired, though Recover's listing still finds it).
		for _, b := range [][]byte{bucketUnleased, bucketLeased} {
			if err := tx.DeleteBucket(b); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
				return abort(err)
			}
		}
		return buildIndex(tx)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
