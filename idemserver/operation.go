package idemserver

import (
	"math/rand/v2"
	"net/http"
	"sync/atomic"
)

// lastOperation is the default Config.Operation, r.Method + " " + r.URL.Path, which returns
// the string it built for an earlier request when this one's method and path are the same:
// an API whose keyed routes carry no ids (POST /v1/payments) then builds the string once
// instead of once a request, and NewMemory keeps one copy of it for every key instead of
// one each. A request with another method or path gets a new string, as before; one in 64
// of them (a random draw, so that goroutines share no counter) becomes the one remembered,
// so that a server whose busiest route changes finds it again, while one whose paths all
// differ pays one small allocation more only for that one in 64.
type lastOperation struct {
	last atomic.Pointer[string]
}

func (o *lastOperation) operation(r *http.Request) string {
	last := o.last.Load()
	if last != nil && isOperation(*last, r.Method, r.URL.Path) {
		return *last
	}
	op := r.Method + " " + r.URL.Path
	if last == nil || rand.Uint32()%64 == 0 {
		kept := new(string) // allocated only when kept: &op would move op to the heap on every call
		*kept = op
		o.last.Store(kept)
	}
	return op
}

// isOperation reports whether op is method + " " + path, without building that string.
func isOperation(op, method, path string) bool {
	return len(op) == len(method)+1+len(path) && op[:len(method)] == method && endsWithPath(op, path)
}
