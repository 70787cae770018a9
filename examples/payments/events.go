package main

import (
	"encoding/json"
	"io"
	"sync"

	"github.com/idemkit/idem"
)

// event is one JSON line a child writes to the parent on stdout. A line cut short by SIGKILL
// does not parse and is dropped; every complete line is a fact the parent may count.
type event struct {
	T string `json:"t"` // "recover", "sending", "call", "done" or "stats"

	// call: one Do that did network work (not answered from the keystore).
	// done: the payment reached its final state in this process.
	I        int     `json:"i,omitempty"`
	MS       float64 `json:"ms,omitempty"`       // call: latency of the Do
	OK       bool    `json:"ok,omitempty"`       // done: succeeded
	Pending  bool    `json:"pending,omitempty"`  // done: gave up with the outcome still pending
	Status   int     `json:"status,omitempty"`   // done: HTTP status of the final answer
	ID       string  `json:"id,omitempty"`       // done: the payment id the API returned
	Tries    int     `json:"tries,omitempty"`    // done: intents (keys) used, >1 after a stored 5xx
	Inflight int     `json:"inflight,omitempty"` // done: other payments still in flight

	Report    *idem.RecoverReport `json:"report,omitempty"`    // recover
	Recovered int                 `json:"recovered,omitempty"` // recover: records now final
	Stats     *idem.Stats         `json:"stats,omitempty"`     // every event but sending: cumulative for this child
}

// emitter writes events as single lines. Each line is one write of far less than PIPE_BUF
// bytes, so lines from concurrent senders never interleave. With stats set, every event but
// "sending" carries the client's counters, read under the same lock as the write: the
// parent keeps the last snapshot it reads, so the snapshots must reach it in the order they
// were taken. The parent kills a child right after one of its events, so each event carries
// them: a child killed just after Recover, or after payments answered from the keystore,
// would otherwise take Recover's counters with it.
type emitter struct {
	mu    sync.Mutex
	w     io.Writer
	stats func() idem.Stats
}

func (e *emitter) emit(ev event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stats != nil && ev.T != "sending" {
		st := e.stats()
		ev.Stats = &st
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	b = append(b, '\n')
	_, _ = e.w.Write(b) // the parent reads until we die; nothing to do if it is gone
}
