package probe

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// transientTries bounds how many requests one check sends while the answers are transient.
const transientTries = 5

// transient reports whether a says nothing about the contract: any transport error (a
// refused dial or a DNS failure sent nothing; a reset or a timeout may have lost the answer),
// 429 or 503, or a 5xx that is not a replay (the request may not have run, or ran and its
// answer was lost). A replayed 5xx is the key's stored answer, judged by the checks. An API
// that never answers at all makes Run return ErrUnreachable.
func transient(a answer) bool {
	if a.err != nil {
		return true
	}
	return a.status == http.StatusTooManyRequests || a.status >= 500 && !replayed(a)
}

// replayed reports whether a carries the replay marker.
func replayed(a answer) bool {
	return a.err == nil && strings.EqualFold(a.header.Get(ReplayedHeader), "true")
}

// storedServerError reports whether a is a replayed 5xx: the key's stored answer says
// execution began and its effect is unknown, so the key will never give a 2xx.
func storedServerError(a answer) bool {
	return a.status >= 500 && replayed(a)
}

// settle sends until the answer is neither transient nor wanted again by also (nil: none),
// at most transientTries times, pausing between sends as pause does. It returns the last
// answer and the transient ones before it, for evidence.
func (p *prober) settle(ctx context.Context, send func() answer, also func(answer) bool) (answer, []answer) {
	var met []answer
	for i := 1; ; i++ {
		a := send()
		if !transient(a) && (also == nil || !also(a)) || i >= transientTries || !p.s.pause(ctx, a) {
			return a, met
		}
		if transient(a) {
			met = append(met, a)
		}
	}
}

// answerKind names a for a tally: the status code, or "transport error".
func answerKind(a answer) string {
	if a.err != nil {
		return "transport error"
	}
	return fmt.Sprint(a.status)
}

// transientNote is evidence about transient answers met before the verdict, "" when none.
func transientNote(met []answer) string {
	if len(met) == 0 {
		return ""
	}
	t := map[string]int{}
	for _, a := range met {
		t[answerKind(a)]++
	}
	return fmt.Sprintf(" (after transient %s)", formatTally(t))
}

// notObservedTransient sets check NotObserved after only transient answers, last among them.
func (p *prober) notObservedTransient(check string, last answer, met []answer) {
	met = append(met, last)
	t := map[string]int{}
	for _, a := range met {
		t[answerKind(a)]++
	}
	p.set(check, NotObserved, "only transient answers in %d tries (%s; last %s)", len(met), formatTally(t), last)
}
