package idem

import (
	"context"
	"sync"
)

// keyLocks serialises calls on one key (or intent) inside a process, so that two goroutines
// never send the same key concurrently: the second waits and then sees the first's outcome
// in the keystore. Entries are removed when nobody holds or waits for them.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	sem  chan struct{} // holds one token while locked
	refs int           // holders and waiters
}

func (l *keyLocks) ref(name string) *keyLock {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[string]*keyLock)
	}
	k := l.m[name]
	if k == nil {
		k = &keyLock{sem: make(chan struct{}, 1)}
		l.m[name] = k
	}
	k.refs++
	return k
}

func (l *keyLocks) unref(name string, k *keyLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.refs--; k.refs == 0 {
		delete(l.m, name)
	}
}

// lock waits for name or for ctx to end. waited reports whether another call held it.
func (l *keyLocks) lock(ctx context.Context, name string) (unlock func(), waited bool, err error) {
	k := l.ref(name)
	select {
	case k.sem <- struct{}{}:
	default:
		waited = true
		select {
		case k.sem <- struct{}{}:
		case <-ctx.Done():
			l.unref(name, k)
			return nil, true, ctx.Err()
		}
	}
	return func() { <-k.sem; l.unref(name, k) }, waited, nil
}

// tryLock takes name only if nobody holds it.
func (l *keyLocks) tryLock(name string) (unlock func(), ok bool) {
	k := l.ref(name)
	select {
	case k.sem <- struct{}{}:
		return func() { <-k.sem; l.unref(name, k) }, true
	default:
		l.unref(name, k)
		return nil, false
	}
}
