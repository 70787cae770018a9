package idem

import (
	"bytes"
	"fmt"
	"io"
)

// nextBody is the call's body for go-retryablehttp (a ReaderFunc). retryablehttp asks for
// a reader once when the request is made (its Len gives Content-Length) and once before
// each attempt, wrapping it in io.NopCloser. The reader stays a plain *bytes.Reader: net/http
// writes the headers and body of a request whose body it knows to be in memory in one write,
// and flushes the headers on their own first for any other body type (a second write
// syscall, about 10 µs a call on loopback, measured). The first two readers share the one
// inside the call, which saves an allocation on every Do; a resend gets a reader of its own,
// because net/http may still be reading the previous attempt's body after that attempt
// returned (an early answer, a dropped connection).
func (cl *call) nextBody() (io.Reader, error) {
	cl.bodyReads++
	r := &cl.own.body
	if cl.bodyReads > 2 {
		r = new(bytes.Reader)
	}
	body := cl.rec.Request.Body
	if f := cl.c.dialect.keyField; f != "" {
		if cl.sendBody == nil {
			b, err := withKeyField(body, f, cl.rec.Key)
			if err != nil { // checked by Do before anything was persisted; a stored record may predate the profile
				return nil, fmt.Errorf("%w: %w", ErrInvalidOperation, err)
			}
			cl.sendBody = b
		}
		body = cl.sendBody
	}
	r.Reset(body)
	return r, nil
}
