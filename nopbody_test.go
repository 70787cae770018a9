package idem

import (
	"bytes"
	"io"
)

func nopBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
