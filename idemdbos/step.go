package idemdbos

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/google/uuid"

	"github.com/idemkit/idem"
)

// KeyNamespace is the UUID namespace of the keys derived from a Step (RFC 9562 §5.5). It is
// fixed: changing it would give every pending step a new key, and a step already sent would
// pay again.
var KeyNamespace = uuid.MustParse("a3e2f6c0-2d1b-5c8e-8f47-0d9b6e1c3a52")

// Step is DBOS's identity of one step: the same in every execution of the workflow.
type Step struct {
	App        string `json:"app,omitempty"` // Config.App: which application's workflow ids
	WorkflowID string `json:"workflow_id"`   // dbos.GetWorkflowID in the step
	StepID     int    `json:"step_id"`       // dbos.GetStepID in the step: the step's place in the workflow
}

// StepOf returns the step running in ctx, which must be the context DBOS passes to a step
// function (the context of dbos.RunAsStep's function), and app. It returns an error outside
// a DBOS workflow.
func StepOf(ctx context.Context, app string) (Step, error) {
	dc, ok := ctx.(dbos.Context)
	if !ok {
		return Step{}, fmt.Errorf("%w: idemdbos: not a DBOS step's context (%T)", idem.ErrInvalidOperation, ctx)
	}
	wf, err := dbos.GetWorkflowID(dc)
	if err != nil {
		return Step{}, fmt.Errorf("%w: idemdbos: %v", idem.ErrInvalidOperation, err)
	}
	id, err := dbos.GetStepID(dc)
	if err != nil {
		return Step{}, fmt.Errorf("%w: idemdbos: %v", idem.ErrInvalidOperation, err)
	}
	return Step{App: app, WorkflowID: wf, StepID: id}, nil
}

// Intent is the step as idem's intent: "dbos:" followed by the application, the workflow id
// (each path-escaped, so that no "/" inside them can make two steps one) and the step id,
// joined by "/". When that is longer than idem.MaxIntentLength, it is "dbos:sha1:" and the
// step's key.
func (s Step) Intent() string {
	in := s.name()
	if len(in) > idem.MaxIntentLength {
		return "dbos:sha1:" + s.Key()
	}
	return in
}

// Key is the step's idempotency key: the version 5 UUID of the full identity in
// KeyNamespace, in its 36-character text form.
func (s Step) Key() string {
	return uuid.NewSHA1(KeyNamespace, []byte(s.name())).String()
}

func (s Step) name() string {
	return "dbos:" + url.PathEscape(s.App) + "/" + url.PathEscape(s.WorkflowID) + "/" + strconv.Itoa(s.StepID)
}
