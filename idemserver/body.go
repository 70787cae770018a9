package idemserver

import (
	"bytes"
	"io"
	"net/http"
)

// readBody reads r's body whole, at most limit bytes. Its result is
// io.ReadAll(http.MaxBytesReader(w, r.Body, limit)), errors included (*http.MaxBytesError
// beyond limit, after which net/http closes the connection once the answer is sent), read
// without that reader: into one buffer sized from Content-Length when the request declares
// one within limit, so that a body costs one allocation, of its own size, rather than
// io.ReadAll's 512 bytes and its doublings. The first buffer is at most presize bytes: a
// declared length is only a claim, and a client that declares 1 MiB and sends nothing must
// not make each of its connections hold 1 MiB. A nil body reads as empty.
// presize caps the buffer readBody allocates before any byte arrives, in bytes.
const presize = 64 << 10

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, nil
	}
	size := int64(512)
	if cl := r.ContentLength; cl >= 0 && cl < limit {
		size = cl + 1 // room to see io.EOF without growing
	}
	if size > limit {
		size = limit + 1
	}
	if size > presize {
		size = presize
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grows as append does
		}
		end := cap(buf)
		if int64(end) > limit {
			end = int(limit) + 1 // never more than MaxBytesReader would read
		}
		n, err := r.Body.Read(buf[len(buf):end])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			// Over the limit: http.MaxBytesReader over what was read and the rest gives the
			// error, and tells w to close the connection.
			rest := io.MultiReader(bytes.NewReader(buf), r.Body)
			_, err := io.ReadAll(http.MaxBytesReader(w, io.NopCloser(rest), limit))
			return nil, err
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
