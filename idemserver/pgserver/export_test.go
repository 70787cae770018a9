package pgserver

import "time"

// SetTurnTimeout sets how long a claim method waits for a handler's statement before it
// cancels it (5 s), for the tests that wait for it; restore puts it back.
func SetTurnTimeout(d time.Duration) (restore func()) {
	old := turnTimeout.Swap(int64(d))
	return func() { turnTimeout.Store(old) }
}
