package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/idemkit/idem/keystore"
)

// Problem is one damaged entry that Verify found.
type Problem struct {
	// Bucket is where the entry is: "records", "intents", "intenthash", "unleased" or
	// "leased" (the pending index) or "quarantine".
	Bucket string
	// Scope and Key name the record concerned when they can be read ("" otherwise); Intent
	// the intent, for an index entry.
	Scope, Key, Intent string
	// Err says what is wrong; it wraps ErrCorrupt.
	Err error
}

// Report is what Verify found: counts of sound entries, and the problems.
type Report struct {
	Records     int       // records that decode (bodies not opened: that needs the key ring)
	Intents     int       // intents indexed soundly in both indexes
	Quarantined int       // quarantined records (see Quarantine), kept aside
	Problems    []Problem // in bucket order, then key order
}

// Verify reads the whole file and checks every record (checksum, JSON, key, Validate), the
// pending index against the pending records (verify_index.go), and both intent indexes
// against each other and against the records: every indexed intent names a
// record that decodes and carries that intent, every such record is indexed in both, and
// every entry's checksum matches. It changes nothing. Sealed bodies are not opened (their
// authentication tag is checked when a read opens them). It returns ErrCorrupt only when the
// pages themselves cannot be walked; damaged entries are in Report.Problems. Other errors:
// keystore.ErrClosed, ctx.Err().
func (s *Store) Verify(ctx context.Context) (Report, error) {
	if err := s.begin(ctx); err != nil {
		return Report{}, err
	}
	var r Report
	err := s.view(func(tx *bbolt.Tx) error {
		r = Report{}
		return verifyTx(ctx, tx, &r)
	})
	return r, s.commit.note(dbError(err))
}

func verifyTx(ctx context.Context, tx *bbolt.Tx, r *Report) error {
	problem := func(bucket, scope, key, intent string, err error) {
		r.Problems = append(r.Problems, Problem{Bucket: bucket, Scope: scope, Key: key, Intent: intent, Err: err})
	}
	// Records: each sound one with an intent must be indexed under it, naming it.
	intentOf := map[string]string{} // scoped record key -> scoped intent key
	pending := map[string]*keystore.Record{}
	err := forEachRecord(tx.Bucket(bucketRecords), func(k, v []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, _, err := decodeSealed(k, v)
		if err != nil {
			if _, ok := errors.AsType[*structuralError](err); ok {
				return err
			}
			d := damaged(k, err)
			problem("records", d.Scope, d.Key, "", err)
			return nil
		}
		r.Records++
		if rec.State == keystore.StatePending {
			pending[string(k)] = rec
		}
		if rec.Intent != "" {
			ik := scopedKey(rec.Scope, rec.Intent)
			intentOf[string(k)] = string(ik)
			key, found, err := lookupIntent(tx, ik)
			switch {
			case err != nil:
				problem("intents", rec.Scope, rec.Key, rec.Intent, err)
			case !found:
				problem("intents", rec.Scope, rec.Key, rec.Intent,
					fmt.Errorf("%w: record (%q, %q) has intent %q, which neither intent index holds", ErrCorrupt, rec.Scope, rec.Key, rec.Intent))
			case key != rec.Key:
				problem("intents", rec.Scope, rec.Key, rec.Intent,
					fmt.Errorf("%w: intent %q of record (%q, %q) is indexed as key %q", ErrCorrupt, rec.Intent, rec.Scope, rec.Key, key))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The index by name: each entry sound, in the index by hash too, naming a record of it.
	err = tx.Bucket(bucketIntents).ForEach(func(ik, _ []byte) error {
		scope, intent, ok := splitScopedKey(ik)
		if !ok {
			problem("intents", "", "", string(clip(ik)), fmt.Errorf("%w: malformed intent index key", ErrCorrupt))
			return nil
		}
		key, _, err := lookupIntent(tx, ik)
		if err != nil {
			problem("intents", scope, "", intent, err)
			return nil
		}
		rk := scopedKey(scope, key)
		if tx.Bucket(bucketRecords).Get(rk) == nil {
			problem("intents", scope, key, intent, fmt.Errorf("%w: intent %q names key %q, which has no record", ErrCorrupt, intent, key))
			return nil
		}
		if got, ok := intentOf[string(rk)]; ok && got != string(ik) {
			problem("intents", scope, key, intent, fmt.Errorf("%w: intent %q names key %q, whose record has another intent", ErrCorrupt, intent, key))
			return nil
		}
		r.Intents++ // sound, or naming a damaged record (reported under records)
		return nil
	})
	if err != nil {
		return err
	}
	// The index by hash: each entry sound and its twin in the index by name.
	err = tx.Bucket(bucketIntentHash).ForEach(func(hk, v []byte) error {
		ik, _, err := openIntentHash(hk, v)
		if err == nil && !bytes.Equal(intentHash(ik), hk) {
			err = fmt.Errorf("%w: intenthash entry %x holds intent %q, whose hash differs", ErrCorrupt, hk, clip(ik))
		}
		if err == nil && tx.Bucket(bucketIntents).Get(ik) == nil {
			scope, intent, _ := splitScopedKey(ik)
			err = fmt.Errorf("%w: intent %q of scope %q is in \"intenthash\" only (a damaged key in \"intents\")", ErrCorrupt, intent, scope)
		}
		if err != nil {
			problem("intenthash", "", "", "", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	verifyPendingIndex(tx, pending, problem)
	if q := tx.Bucket(bucketQuarantine); q != nil {
		err = q.ForEach(func(k, v []byte) error {
			if _, err := decodeQuarantined(k, v); err != nil {
				d := damaged(k, err)
				problem("quarantine", d.Scope, d.Key, "", err)
				return nil
			}
			r.Quarantined++
			return nil
		})
	}
	return err
}
