package idem

import (
	"bytes"
	"io"
)

// requestBody is the reader of a request body: go-retryablehttp reads its length (Len) and
// net/http closes it when sent. Close does nothing: the bytes are the record's.
type requestBody struct{ bytes.Reader }

func (*requestBody) Close() error { return nil }

// nextBody is the call's body for go-retryablehttp (a ReaderFunc). retryablehttp asks for
// a reader once when the request is made (for Content-Length, closed at once) and once before
// each attempt. The first two share the reader inside the call, which saves two allocations
// on every Do; a resend gets a reader of its own, because net/http may still be reading the
// previous attempt's body after that attempt returned (an early answer, a dropped connection).
func (cl *call) nextBody() (io.Reader, error) {
	cl.bodyReads++
	r := &cl.own.body
	if cl.bodyReads > 2 {
		r = new(requestBody)
	}
	r.Reset(cl.rec.Request.Body)
	return r, nil
}
