package idemserver

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// answerCopy is what Memory returned for a stored answer before it kept answers encoded: a
// copy by http.Header.Clone and bytes.Clone, nil maps, slices and bodies staying nil.
func answerCopy(r *Response) *Response {
	var body []byte
	if r.Body != nil {
		body = append([]byte{}, r.Body...)
	}
	return &Response{StatusCode: r.StatusCode, Header: r.Header.Clone(), Body: body}
}

func TestAnswerEncoding(t *testing.T) {
	long := strings.Repeat("v", 300) // lengths over one varint byte
	for _, resp := range []*Response{
		{StatusCode: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"pay_1"}`)},
		{StatusCode: 200},
		{StatusCode: 204, Header: http.Header{}, Body: []byte{}},
		{StatusCode: 500, Header: http.Header{"X-Nil": nil, "X-Empty": {}, "X-Two": {"a", ""}, "": {""}}, Body: []byte{0, 1, 2}},
		{StatusCode: -1, Header: http.Header{long: {long, long}}, Body: []byte(long)},
		{StatusCode: 1 << 40, Body: []byte("x")},
	} {
		b := encodeAnswer(resp)
		if len(b) != cap(b) {
			t.Errorf("%+v: encoded in %d bytes of a %d-byte allocation", resp, len(b), cap(b))
		}
		got, want := decodeAnswer(b), answerCopy(resp)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decoded %#v, want %#v", got, want)
		}
		if len(got.Body) > 0 && unsafe.SliceData(got.Body) == unsafe.SliceData(b[len(b)-len(got.Body):]) {
			t.Errorf("decoded body shares the encoded answer's memory")
		}
	}
}

// FuzzAnswerEncoding: any answer decodes to what Memory returned before it kept answers
// encoded (answerCopy).
func FuzzAnswerEncoding(f *testing.F) {
	f.Add(201, "Content-Type", "application/json", "X-Request-Id", []byte(`{"id":"pay_1"}`), byte(0))
	f.Add(0, "", "", "", []byte(nil), byte(7))
	f.Fuzz(func(t *testing.T, status int, k1, v1, k2 string, body []byte, shape byte) {
		resp := &Response{StatusCode: status, Body: body}
		if shape&1 != 0 {
			resp.Header = http.Header{k1: {v1, k2}}
			if shape&2 != 0 {
				resp.Header[k2] = nil
			}
			if shape&4 != 0 {
				resp.Header[k1+k2] = []string{}
			}
		}
		if shape&8 != 0 && body == nil {
			resp.Body = []byte{}
		}
		if got, want := decodeAnswer(encodeAnswer(resp)), answerCopy(resp); !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded %#v, want %#v", got, want)
		}
	})
}
