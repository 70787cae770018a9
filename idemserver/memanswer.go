package idemserver

import (
	"encoding/binary"
	"net/http"
)

// Memory keeps each stored answer as one pointer-free byte slice (encodeAnswer), not as a
// Response with its header map, value slices and body: the collector marks a kept answer
// as one object it need not scan, where a Response was five or six objects to scan and
// mark on every cycle. With 100,000 keys kept for the retention window, marking them was a
// third of the process's CPU. Replays are rare; they decode the slice (decodeAnswer) into a
// fresh Response, the copy Lookup and Claim returned before.
//
// The layout: a flags byte (answerHeader: the header map is not nil; answerBody: the body is
// not nil), the status code (varint), the number of header fields (uvarint), each field's
// name (uvarint length, bytes) and values (uvarint count + 1, 0 for a nil slice; each value's
// uvarint length and bytes), then the body to the end.
const (
	answerHeader = 1 << iota
	answerBody
)

// encodeAnswer returns resp encoded, in one allocation of its exact size.
func encodeAnswer(resp *Response) []byte {
	var status [binary.MaxVarintLen64]byte
	n := 1 + binary.PutVarint(status[:], int64(resp.StatusCode)) + uvarintLen(uint64(len(resp.Header))) + len(resp.Body)
	for k, vs := range resp.Header {
		n += uvarintLen(uint64(len(k))) + len(k) + uvarintLen(uint64(len(vs))+1)
		for _, v := range vs {
			n += uvarintLen(uint64(len(v))) + len(v)
		}
	}
	b := make([]byte, 1, n)
	if resp.Header != nil {
		b[0] |= answerHeader
	}
	if resp.Body != nil {
		b[0] |= answerBody
	}
	b = binary.AppendVarint(b, int64(resp.StatusCode))
	b = binary.AppendUvarint(b, uint64(len(resp.Header)))
	for k, vs := range resp.Header {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		if vs == nil {
			b = append(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(vs))+1)
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, resp.Body...)
}

// decodeAnswer returns the Response that encodeAnswer encoded into b, sharing no memory with
// b: the header as http.Header.Clone would copy it, the body as bytes.Clone would. b is
// always encodeAnswer's output (Memory never takes one from outside), so it is well formed.
func decodeAnswer(b []byte) *Response {
	flags := b[0]
	b = b[1:]
	status, n := binary.Varint(b)
	b = b[n:]
	fields, n := binary.Uvarint(b)
	b = b[n:]
	resp := &Response{StatusCode: int(status)}
	if flags&answerHeader != 0 {
		resp.Header = make(http.Header, fields)
	}
	next := func() string {
		l, n := binary.Uvarint(b)
		s := string(b[n : n+int(l)])
		b = b[n+int(l):]
		return s
	}
	for range fields {
		k := next()
		count, n := binary.Uvarint(b)
		b = b[n:]
		if count == 0 {
			resp.Header[k] = nil
			continue
		}
		vs := make([]string, count-1)
		for i := range vs {
			vs[i] = next()
		}
		resp.Header[k] = vs
	}
	if flags&answerBody != 0 {
		resp.Body = append([]byte{}, b...)
	}
	return resp
}

// uvarintLen is the length of x encoded by binary.AppendUvarint.
func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}
