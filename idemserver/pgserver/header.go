package pgserver

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"
)

// b64Member holds a stored header some of whose names or values are not valid UTF-8 (HTTP
// allows such bytes in a value, such as a Latin-1 Location) or hold a NUL. jsonb can only
// hold text without NUL (it refuses \u0000: the answer could never be stored, and every
// retry ran the handler again for a 503), and encoding/json would replace invalid bytes
// with U+FFFD, so such a header is stored as
// {"idem:b64":{base64(name):[base64(value)...]}}; a header name never holds ':', so no
// real header can be mistaken for it. Every other header is stored as plain JSON, as it
// always was.
const b64Member = "idem:b64"

// encodeHeader is the jsonb text of h, byte for byte recoverable by decodeHeader.
func encodeHeader(h http.Header) ([]byte, error) {
	if headerIsText(h) {
		return json.Marshal(h)
	}
	enc := make(map[string][]string, len(h))
	for k, vs := range h {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = base64.StdEncoding.EncodeToString([]byte(v))
		}
		enc[base64.StdEncoding.EncodeToString([]byte(k))] = out
	}
	return json.Marshal(map[string]map[string][]string{b64Member: enc})
}

func headerIsText(h http.Header) bool {
	for k, vs := range h {
		if !jsonbText(k) {
			return false
		}
		for _, v := range vs {
			if !jsonbText(v) {
				return false
			}
		}
	}
	return true
}

// jsonbText reports a string jsonb stores as it is: valid UTF-8 without NUL.
func jsonbText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// decodeHeader reads what encodeHeader wrote (and every header stored before it existed).
func decodeHeader(data []byte) (http.Header, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	enc, ok := raw[b64Member]
	if !ok || len(raw) != 1 {
		var h http.Header
		if err := json.Unmarshal(data, &h); err != nil {
			return nil, err
		}
		if h == nil { // stored as null
			h = http.Header{}
		}
		return h, nil
	}
	var m map[string][]string
	if err := json.Unmarshal(enc, &m); err != nil {
		return nil, err
	}
	h := make(http.Header, len(m))
	for k, vs := range m {
		name, err := base64.StdEncoding.DecodeString(k)
		if err != nil {
			return nil, err
		}
		out := make([]string, len(vs))
		for i, v := range vs {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return nil, err
			}
			out[i] = string(b)
		}
		h[string(name)] = out
	}
	return h, nil
}
