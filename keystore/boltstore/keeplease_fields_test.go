package boltstore_test

import (
	"net/http"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/keystore"
	"github.com/idemkit/idem/keystore/boltstore"
)

// An update that names another lease than the stored one is made again inside the commit
// (keepLease), now from the decoded value rather than from the stored copy: every other field
// of the update must survive that round, whether the write is Update, UpdateFromState or
// UpdateDeferred, sealed or not, with headers of several values, nil lists, secret names in
// any case (SecretHeaders in request and response, Set-Cookie), unicode and the widest ints.
func TestKeepLeaseKeepsEveryOtherField(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		for _, how := range []string{"Update", "UpdateFromState", "UpdateDeferred"} {
			t.Run(how+map[bool]string{false: "/plain", true: "/sealed"}[sealed], func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "keys.db")
				opts := boltstore.Options{SecretHeaders: []string{"X-Sig"}, FlushDelay: time.Hour}
				if sealed {
					opts.KeyRing = ring(t, "k1", "k1")
				}
				s := open(t, path, &opts)
				rec := record("sç", "ké")
				rec.Owner, rec.LeaseUntil, rec.Fence = "o1", rec.CreatedAt.Add(time.Minute), 1<<62
				if err := s.Create(bg, rec); err != nil {
					t.Fatal(err)
				}
				next := rec.Clone()
				next.Owner, next.LeaseUntil = "o2", rec.LeaseUntil.Add(time.Hour) // kept from the store
				next.State, next.Attempts, next.LastStatusCode = keystore.StateFailed, 1<<40, 422
				next.Reason, next.Error, next.NotExecuted, next.Note = "réason", "erreur", true, "ノート"
				next.UpdatedAt = rec.UpdatedAt.Add(time.Second)
				next.Request.Header = http.Header{"Accept": {"a", "b", ""}, "X-Nil": nil, "x-sig": {"s"},
					"AUTHORIZATION": {"Bearer sk"}, "Content-Type": {"application/json"}}
				next.Response = &keystore.Response{StatusCode: 422, Body: []byte("{\"e\":\"ü\"}\x00"),
					Header: http.Header{"set-cookie": {"sid=1", "sid=2"}, "X-SIG": {"t"}, "Request-Id": {"r1", "r2"}, "X-Nil": nil}}
				var err error
				switch how {
				case "Update":
					err = s.Update(bg, next)
				case "UpdateFromState":
					err = s.UpdateFromState(bg, next, keystore.StatePending)
				default:
					err = s.UpdateDeferred(bg, next)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = open(t, path, &opts)
				defer s.Close()
				got, err := s.Get(bg, "sç", "ké")
				if err != nil {
					t.Fatal(err)
				}
				want := keystore.StoredCopy(next, "X-Sig")
				want.Owner, want.LeaseUntil, want.Fence = rec.Owner, rec.LeaseUntil, rec.Fence
				for _, r := range []*keystore.Record{got, want} {
					r.CreatedAt, r.UpdatedAt, r.LeaseUntil = r.CreatedAt.UTC(), r.UpdatedAt.UTC(), r.LeaseUntil.UTC()
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("stored\n%+v %+v\nwant\n%+v %+v", got, got.Response, want, want.Response)
				}
			})
		}
	}
}
