package idemtemporal

import (
	"fmt"
	"net/url"

	"github.com/google/uuid"
	"go.temporal.io/sdk/activity"

	"github.com/idemkit/idem"
)

// KeyNamespace is the UUID namespace of the keys derived from a Step (RFC 9562 §5.5: a
// version 5 UUID is SHA-1 over the namespace and the name). It is fixed: changing it would
// give every running activity a new key, and the next attempt of a step already sent would
// pay again.
var KeyNamespace = uuid.MustParse("6f1c1d2e-4a0b-5e7a-9c3d-2b8f0e6a1d44")

// Scope says which of Temporal's identifiers make a step.
type Scope int

const (
	// ScopeRun (the default): namespace, workflow id, run id and activity id, the identity
	// Temporal's documentation suggests for an idempotency key. A workflow retry, a reset
	// and a continue-as-new start new runs whose activities are new steps.
	ScopeRun Scope = iota
	// ScopeWorkflow: namespace, workflow id and activity id, without the run id. Use it
	// only when the workflow id names the business payment and the activity id is set
	// explicitly (ActivityOptions.ActivityID): Temporal's default activity ids are sequence
	// numbers that restart in every run, so a later run's activity "5" may be another
	// payment. A new run of the workflow then finds the payment made, as long as idem keeps
	// the record (Config.Retention, 72 hours by default).
	ScopeWorkflow
)

// String names the scope: "run" or "workflow".
func (s Scope) String() string {
	switch s {
	case ScopeRun:
		return "run"
	case ScopeWorkflow:
		return "workflow"
	}
	return fmt.Sprintf("Scope(%d)", int(s))
}

// Step is Temporal's identity of one activity: the same for every attempt of it, on every
// worker. RunID is empty under ScopeWorkflow.
type Step struct {
	Namespace  string // activity.Info.Namespace
	WorkflowID string // the workflow execution's id
	RunID      string // the workflow execution's run id; "" under ScopeWorkflow
	ActivityID string // activity.Info.ActivityID: ActivityOptions.ActivityID, or Temporal's sequence number
}

// StepOf returns the step of the activity described by info under scope. An unknown scope
// is treated as ScopeRun.
func StepOf(info activity.Info, scope Scope) Step {
	s := Step{Namespace: info.Namespace, WorkflowID: info.WorkflowExecution.ID,
		RunID: info.WorkflowExecution.RunID, ActivityID: info.ActivityID}
	if scope == ScopeWorkflow {
		s.RunID = ""
	}
	return s
}

// Intent is the step as idem's intent: "temporal:" followed by the namespace, the workflow
// id, the run id and the activity id, each path-escaped (so that no "/" inside an id can
// make two steps one), joined by "/". When that is longer than idem.MaxIntentLength (ids of
// up to 1000 bytes each are allowed by Temporal), it is "temporal:sha1:" and the step's key.
func (s Step) Intent() string {
	in := s.name()
	if len(in) > idem.MaxIntentLength {
		return "temporal:sha1:" + s.Key()
	}
	return in
}

// Key is the step's idempotency key: the version 5 UUID of the full identity in
// KeyNamespace, in its 36-character text form.
func (s Step) Key() string {
	return uuid.NewSHA1(KeyNamespace, []byte(s.name())).String()
}

func (s Step) name() string {
	return "temporal:" + url.PathEscape(s.Namespace) + "/" + url.PathEscape(s.WorkflowID) + "/" +
		url.PathEscape(s.RunID) + "/" + url.PathEscape(s.ActivityID)
}
