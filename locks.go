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
	m  map[lockName]*keyLock
}

// lockName names a key ('k') or an intent ('i') in a scope. A struct, not a joined string:
// taking a lock allocates nothing.
type lockName struct {
	kind        byte
	scope, name string
}

func intentLockName(scope, intent string) lockName { return lockName{'i', scope, intent} }
func keyLockName(scope, key string) lockName       { return lockName{'k', scope, key} }

type keyLock struct {
	sem  chan struct{} // holds one token while locked
	refs int           // holders and waiters
}

// lockPool recycles the entries of locks nobody holds any more: most locks live for one call.
var lockPool = sync.Pool{New: func() any { return &keyLock{sem: make(chan struct{}, 1)} }}

func (l *keyLocks) ref(name lockName) *keyLock {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[lockName]*keyLock)
	}
	k := l.m[name]
	if k == nil {
		k = lockPool.Get().(*keyLock)
		l.m[name] = k
	}
	k.refs++
	return k
}

func (l *keyLocks) unref(name lockName, k *keyLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.refs--; k.refs == 0 {
		delete(l.m, name)
		lockPool.Put(k) // its token was taken back: sem is empty
	}
}

// heldLock is a lock taken by keyLocks.lock; Unlock releases it.
type heldLock struct {
	l    *keyLocks
	name lockName
	k    *keyLock
}

// Unlock releases the lock.
func (h heldLock) Unlock() { <-h.k.sem; h.l.unref(h.name, h.k) }

// lock waits for name or for ctx to end. waited reports whether another call held it.
func (l *keyLocks) lock(ctx context.Context, name lockName) (h heldLock, waited bool, err error) {
	k := l.ref(name)
	select {
	case k.sem <- struct{}{}:
	default:
		waited = true
		select {
		case k.sem <- struct{}{}:
		case <-ctx.Done():
			l.unref(name, k)
			return heldLock{}, true, ctx.Err()
		}
	}
	return heldLock{l, name, k}, waited, nil
}

// tryLock takes name only if nobody holds it.
func (l *keyLocks) tryLock(name lockName) (unlock func(), ok bool) {
	k := l.ref(name)
	select {
	case k.sem <- struct{}{}:
		return heldLock{l, name, k}.Unlock, true
	default:
		l.unref(name, k)
		return nil, false
	}
}
