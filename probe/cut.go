package probe

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// cutOutcome is what became of a request whose answer the probe cut.
type cutOutcome int

const (
	cutNotSent  cutOutcome = iota // the request was not written: nothing reached the server
	cutAtAnswer                   // the answer began and the probe closed the connection unread
	cutNoAnswer                   // written, and no answer came before the client's timeout
)

// cutPost sends body with key and then loses the answer on purpose, as a client whose
// connection breaks after sending: it closes the connection at the answer's first byte (by
// then a server that stores before it answers has committed), or at the client's timeout.
// Whatever was answered is discarded unread: the caller knows only that the request was
// written.
func (s *sender) cutPost(ctx context.Context, key string, body []byte) cutOutcome {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wrote, began atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
		GotFirstResponseByte: func() {
			began.Store(true)
			cancel() // the connection closes: the rest of the answer is never read
		},
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, s.cfg.BaseURL+s.cfg.Path, nil)
	if err != nil {
		return cutNotSent
	}
	s.prepare(req, key, body)
	resp, err := s.cfg.HTTPClient.Do(req)
	s.mu.Lock()
	s.sent++
	if err == nil || began.Load() {
		s.answered = true
	}
	s.mu.Unlock()
	if err == nil {
		// The answer won the race with the cancel: close it unread, as lost.
		resp.Body.Close()
	}
	switch {
	case !wrote.Load():
		return cutNotSent
	case began.Load() || err == nil:
		return cutAtAnswer
	}
	return cutNoAnswer
}
