package idem

import (
	"net/http"

	"github.com/idemkit/idem/outcome"
)

// Result: the final answer of an operation, and where it came from.

// SourceHeader is the response header the Transport sets on every answer it returns for an
// operation, to the Result's Source ("response", "replay", "status", "store", "lookup"), so
// that code under a generated client can tell, for example, a 201 from the server from a 200
// that a business lookup found. It is never sent to the server.
const SourceHeader = "Idem-Source"

// KeyResponseHeader is the response header the Transport sets, next to SourceHeader, to the
// operation's idempotency key (Result.Key), so that code under a generated client can log
// the key of a success as well as of an error (OperationError.Key). Never sent to the server.
const KeyResponseHeader = "Idem-Key"

// Result is the final, successful answer for an operation.
type Result struct {
	Key             string         // the idempotency key used
	StatusCode      int            // HTTP status of the operation's answer (2xx)
	Header          http.Header    // response headers (nil when the answer came from the status endpoint, or from the keystore and had none worth keeping)
	Body            []byte         // the response body, byte for byte
	Attempts        int            // requests sent in this call: 0 when it sent none (answered from the store, or a record an earlier call left pending settled by the status endpoint)
	KeyStatusChecks int            // status-endpoint asks made in this call
	Source          outcome.Source // where the answer came from
}

// Replayed reports whether the answer was not produced by this call's own request: a
// server replay (outcome.SourceReplay), a status-endpoint answer (outcome.SourceKeyStatus), the keystore
// (outcome.SourceStore) or the business lookup (outcome.SourceLookup). Stats.Replays counts only the first
// kind, answers marked Idempotent-Replayed.
func (r *Result) Replayed() bool { return r.Source != outcome.SourceResponse }
