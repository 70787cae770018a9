package outcome

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// Class is what one attempt's outcome means for the operation. It drives the next step.
type Class int

const (
	// ClassUndecided: this classifier has no opinion; the next one in the list decides.
	ClassUndecided Class = iota
	// ClassSuccess: the server executed the operation (2xx). Record and return it.
	ClassSuccess
	// ClassRetry: the request was not executed (never written, or 429/503 and the like).
	// Wait Retry-After or backoff, then resend with the same key.
	ClassRetry
	// ClassUnknown: the request may have been executed (written then timeout/reset/EOF,
	// 408, 425, 500, 502, 504, other 5xx, 3xx). Ask the status endpoint before any resend.
	ClassUnknown
	// ClassInProgress: the server is still executing this key (409). Wait, then ask the
	// status endpoint or resend with the same key. Never a failure by itself.
	ClassInProgress
	// ClassKeyConflict: the server says the key was used with another payload (422, or a 400
	// such as Stripe's idempotency_error). Fail with idem.ErrKeyConflict.
	ClassKeyConflict
	// ClassPermanent: a final answer that must not be retried (validation, auth). Fail with
	// idem.ErrPermanent. On a 5xx it is taken as ClassStoredServerError: a server error is never a
	// failure.
	ClassPermanent
	// ClassStoredServerError: the server stored a 5xx as the key's answer (replayed with
	// Idempotent-Replayed: true). Execution began, its effect is unknown, and the key can
	// never tell more: never resent, the record waits for reconciliation
	// (idem.ErrStoredServerError, which also matches idem.ErrOutcomeUnknown).
	ClassStoredServerError
	// ClassDone: the server says the key's request already succeeded and names the resource
	// (a profile rule with Meaning Done: GoCardless's 409 idempotent_creation_conflict). The
	// call fetches it through the profile's FetchPointer route and returns it
	// (SourceLookup); if that fails, the outcome stays unknown (idem.ErrOutcomeUnknown, pending).
	ClassDone
)

var classNames = [...]string{"undecided", "success", "retry", "unknown", "in-progress", "key-conflict", "permanent", "stored-server-error", "done"}

// String returns the class's lower-case name.
func (c Class) String() string {
	if int(c) < len(classNames) && c >= 0 {
		return classNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Attempt is one request's outcome, as classifiers see it.
type Attempt struct {
	Number   int            // 1 for the first request of the call
	Response *http.Response // nil when the transport failed; its body is already read into Body
	Body     []byte         // the response body (at most idem.Policy.MaxResponseSize bytes)
	Err      error          // transport error or attempt timeout; nil when a response came
	// Written reports whether any byte of the request reached the connection. A transport
	// error with Written false means the server cannot have seen the request.
	Written bool
}

// StatusCode returns the response status, or 0 when there was no response.
func (a *Attempt) StatusCode() int {
	if a.Response == nil {
		return 0
	}
	return a.Response.StatusCode
}

// Classifier decides what an attempt's outcome means. Return ClassUndecided to let the next
// classifier in the list decide.
type Classifier interface {
	// Classify returns the Class of attempt a (its response and body, or its transport
	// error), or ClassUndecided to defer to the next classifier in the list.
	Classify(a *Attempt) Class
}

// ClassifierFunc adapts a function to Classifier.
type ClassifierFunc func(a *Attempt) Class

// Classify calls f(a).
func (f ClassifierFunc) Classify(a *Attempt) Class { return f(a) }

// Classifiers is an ordered list; the first decisive answer wins. An attempt no classifier
// decides is ClassUnknown: when in doubt, idem asks before resending.
type Classifiers []Classifier

// Classify returns the first decisive class, or ClassUnknown.
func (cs Classifiers) Classify(a *Attempt) Class {
	for _, c := range cs {
		if f, ok := c.(ClassifierFunc); c == nil || ok && f == nil {
			continue
		}
		if cl := c.Classify(a); cl != ClassUndecided {
			return cl
		}
	}
	return ClassUnknown
}

// DefaultClassifiers returns the classification table below, in order: replayed answers,
// the Stripe-Should-Retry hint header (Stripe's docs, "Idempotent requests"), transport
// errors, then status codes. Prepend your own to override a row.
//
// The table follows the IETF draft "The Idempotency-Key HTTP Header Field"
// (draft-ietf-httpapi-idempotency-key-header), RFC 9110 and Stripe's documented behaviour:
//
//	2xx                                     success (Idempotent-Replayed: true marks a replay)
//	transport error before the request      not sent: resend with the same key (proven
//	                                        only through net/http's own *http.Transport;
//	                                        any other: outcome unknown, see idem.Config.HTTPClient)
//	transport error / timeout after write   outcome unknown: status check, then decide
//	408, 425, 500, 502, 504, other 5xx      outcome unknown: status check, then decide
//	429, 503                                not executed: wait Retry-After or backoff, resend
//	409                                     in progress: wait, status check or resend
//	422 naming idempotency-key reuse, or    key reused with another request: idem.ErrKeyConflict
//	  400 naming it precisely (Stripe's
//	  idempotency_error)
//	any other 400 or 422                    validation: idem.ErrPermanent with the response
//	other 4xx                               permanent: idem.ErrPermanent, never retried
//	3xx, 1xx                                outcome unknown: redirects are never followed,
//	                                        and one proves nothing of the effect (a 303
//	                                        says it was processed, RFC 9110 §15.4.4)
//	a replayed 4xx (Idempotent-Replayed)    permanent: the server decided and stored it
//	any other 4xx to a resend after an      outcome unknown: it says nothing of the earlier
//	  unknown outcome, or (but a 400) after attempt, which may still arrive after a "not
//	  a status "not found" for a key that   found"; the record stays pending, unless
//	  may have been sent (this call's, or   idem.Config.Lookup finds the payment (a success;
//	  any resumed record's)                 asked before a 400 after "not found" fails too)
//	a stored 5xx or 3xx (replayed, status endpoint completed with one, or a 5xx marked
//	  "do not retry")                       outcome unknown for good: idem.ErrStoredServerError
//	Stripe-Should-Retry: true               not executed: resend (not a replayed 5xx)
//	Stripe-Should-Retry: false              408, 425 outcome unknown; 409 in progress; 5xx a
//	                                        stored 5xx; key reuse idem.ErrKeyConflict; other
//	                                        4xx permanent; 3xx as without it: the hint
//	                                        never makes a possibly executed answer a failure
//
// A stored 5xx means execution began and its effect is unknown; the key can never tell
// more. It is never a failure and never resent: the record is manual, keeping the stored
// answer, until a business lookup (idem.Config.Lookup, e.g. LookupByReference: a search by the
// caller's reference) or idem.Client.Resolve settles it. A charge found makes the record
// succeeded; none makes it failed with idem.ErrNotExecuted, and only then may the application
// pay again under a new intent.
//
// The status endpoint (idem.Config.KeyStatusURL, or a KeyStatusFunc for other conventions) answers
// 200 {"status":"completed","response_status":201,"response_body":{...}},
// 202 {"status":"processing"} or 404 {"status":"not_found"}. Without one, an unknown outcome
// is resent with the same key, which the server's idempotency makes safe while the key is
// younger than idem.Config.KeyTTL, and never after.
func DefaultClassifiers() Classifiers {
	return Classifiers{
		ClassifierFunc(ClassifyReplay),
		HintHeader("Stripe-Should-Retry"),
		ClassifierFunc(ClassifyTransport),
		ClassifierFunc(ClassifyStatusCode),
	}
}

// HintHeader returns a classifier that obeys a server hint header (such as Stripe's
// Stripe-Should-Retry) on a non-2xx answer. "true" means the request was not executed and
// may be resent with the same key (ClassRetry), except on a 3xx or 1xx, which stays
// ClassUnknown (a 303 says the request was processed; see ClassifyStatusCode). "false" says only that resending will not
// help; it never says the request was not executed, so it can never turn an answer whose
// outcome may be executed into a failure:
//
//	408, 425         ClassUnknown: the status endpoint is asked before anything else
//	409              ClassInProgress: the key is still executing
//	5xx              ClassStoredServerError: execution began, effect unknown; never resent,
//	                 the record waits for reconciliation (idem.Config.Lookup, idem.Client.Resolve)
//	400, 422         ClassKeyConflict when the body names key reuse (see ClassifyStatusCode),
//	                 else ClassPermanent
//	other 4xx        ClassPermanent: the hint confirms a final answer
//	3xx, 1xx         ClassUnknown, as without the hint (see ClassifyStatusCode)
//
// Other values, and any value on a 2xx, are undecided.
func HintHeader(name string) Classifier {
	return ClassifierFunc(func(a *Attempt) Class {
		if a.Response == nil || a.Response.StatusCode/100 == 2 {
			return ClassUndecided
		}
		switch strings.ToLower(strings.TrimSpace(a.Response.Header.Get(name))) {
		case "true":
			if c := a.Response.StatusCode; c < 200 || c/100 == 3 {
				// A redirect says nothing of the effect (a 303 even says it was processed):
				// "retry" cannot make it not executed.
				return ClassUnknown
			}
			return ClassRetry
		case "false":
			if keyReuseAnswer(a) { // final too, but the finer verdict: the key, not the payload
				return ClassKeyConflict
			}
			return doNotRetry(a.Response.StatusCode)
		}
		return ClassUndecided
	})
}

// doNotRetry is what a "do not retry" hint means for a status: a failure only where the
// status itself is a final answer; wherever the request may have been executed, the outcome
// is still asked about (or waits for reconciliation), never given up.
func doNotRetry(code int) Class {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly:
		return ClassUnknown
	case code == http.StatusConflict:
		return ClassInProgress
	case code >= 500:
		return ClassStoredServerError
	case code >= 400 && code < 500:
		return ClassPermanent
	}
	return ClassUnknown // 3xx (see ClassifyStatusCode), 1xx or out of range: nothing final was said
}

// Replayed reports whether the server marked a's answer as the key's stored one
// (Idempotent-Replayed: true, any letter case); false without an answer.
func (a *Attempt) Replayed() bool {
	return a.Response != nil && strings.EqualFold(a.Response.Header.Get("Idempotent-Replayed"), "true")
}

// ClassifyReplay classifies an error answer the server marks as a replay
// (Idempotent-Replayed: true): the server stored that answer for this key and will send the
// same one to every resend. A stored 4xx is the server's decision (ClassPermanent); a stored
// 5xx means execution began with an unknown effect (ClassStoredServerError), and so does a
// stored 3xx (a redirect proves nothing of the effect; see ClassifyStatusCode). 408, 409,
// 425 and 429 are left to the classifiers after it (ClassUndecided) even when so marked:
// they speak of the request in flight ("in progress", "too many"), never of the operation's
// end, and a first request still running behind a 409 may yet charge.
func ClassifyReplay(a *Attempt) Class {
	if !a.Replayed() || a.Response.StatusCode < 300 || NotFinal(a.Response.StatusCode) {
		return ClassUndecided
	}
	if c := a.Response.StatusCode; c >= 500 || c < 400 {
		return ClassStoredServerError
	}
	return ClassPermanent
}

// ClassifyTransport classifies attempts that got no response: never written means not sent
// (ClassRetry); written means the outcome is unknown.
func ClassifyTransport(a *Attempt) Class {
	if a.Err == nil {
		return ClassUndecided
	}
	var neverSent *notSentError
	if !a.Written || errors.As(a.Err, &neverSent) {
		return ClassRetry
	}
	return ClassUnknown
}

// ClassifyStatusCode classifies by status code: 2xx success; 409 in progress; 422 key conflict
// when the body names idempotency-key reuse (see IsKeyReuse), 400 key conflict when it names
// reuse precisely (Stripe's idempotency_error), any other 400 or 422 permanent (validation);
// 429 and 503 retry (not executed); 408, 425 (RFC 8470: a proxy may have forwarded it), 500,
// 502, 504 and other 5xx unknown (the request may have been executed, or forwarded by a
// proxy); 3xx and 1xx unknown (a redirect is never followed for an operation and proves
// nothing of the effect: a 303 means it was processed, RFC 9110 §15.4.4); other 4xx permanent.
func ClassifyStatusCode(a *Attempt) Class {
	code := a.StatusCode()
	switch {
	case code == 0:
		return ClassUndecided
	case code >= 200 && code < 300:
		return ClassSuccess
	case code == http.StatusConflict:
		return ClassInProgress
	case code == http.StatusUnprocessableEntity, code == http.StatusBadRequest:
		if keyReuseAnswer(a) {
			return ClassKeyConflict
		}
		return ClassPermanent
	case code == http.StatusTooManyRequests, code == http.StatusServiceUnavailable:
		return ClassRetry
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusInternalServerError,
		code == http.StatusBadGateway, code == http.StatusGatewayTimeout:
		return ClassUnknown
	case code >= 400 && code < 500:
		return ClassPermanent
	}
	// Other 5xx: executed or not, we cannot tell. 3xx: a redirect is never followed for an
	// operation, and it says nothing reliable of the effect (a 303 See Other even says the
	// request was processed, RFC 9110 §15.4.4): the status endpoint is asked, and a stored
	// 3xx goes manual like a stored 5xx. 1xx is never a final answer.
	return ClassUnknown
}

// notSentError marks a transport error that happened before any request byte was written.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return "request not sent: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// NotFinal reports whether code is one of the statuses that never end an operation, even reported as its stored
// answer: 409 in progress, 408 and 425 (outcome unknown), 429 (come back later). A status
// endpoint that says "completed with 409" while the first request still runs must not turn
// into a failure, after which the application would pay again.
func NotFinal(code int) bool {
	switch code {
	case http.StatusConflict, http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return false
}

// NotSent wraps err, a transport failure that happened before any byte of the request was
// written: ClassifyTransport then reads the attempt as ClassRetry even when Attempt.Written
// is true. errors.Is and errors.As see err through it.
func NotSent(err error) error { return &notSentError{err} }
