package main

import (
	"fmt"
	"sync"

	"go.uber.org/atomic"

	"github.com/adprouter/adprouter/router"
)

// entry is one live router and the scratch memory its calls reuse.
type entry struct {
	mu       sync.Mutex // serialises calls on this router
	r        *router.Router
	poisoned bool // a panic left the state undefined
	states   []router.RankState
	reqs     []router.Request
	res      router.Result
	released int // the router's IndexBytes at the last release asked for
}

// handleTable maps integer handles to routers. Handles are never reused, so a
// stale handle cannot reach a newer router; C callers never see a Go pointer.
type handleTable struct {
	last atomic.Uint64 // the last handle given out; handles start at 1
	mu   sync.RWMutex  // guards m
	m    map[uint64]*entry
}

var handles = handleTable{m: make(map[uint64]*entry)}

func (t *handleTable) add(r *router.Router) uint64 {
	h := t.last.Inc()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[h] = &entry{r: r}
	return h
}

// acquire returns h's entry with its lock held, so that calls on one router
// run one at a time; the caller must unlock e.mu. A handle never created, or
// destroyed (even while the caller waited for the lock), is an error.
func (t *handleTable) acquire(h uint64) (*entry, error) {
	t.mu.RLock()
	e := t.m[h]
	t.mu.RUnlock()
	if e == nil {
		return nil, fmt.Errorf("%w: %d (never created or already destroyed)", errBadHandle, h)
	}
	e.mu.Lock()
	if e.r == nil {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w: %d (destroyed)", errBadHandle, h)
	}
	return e, nil
}

// remove forgets h, waiting for a call in progress on it to finish.
func (t *handleTable) remove(h uint64) error {
	t.mu.Lock()
	e := t.m[h]
	delete(t.m, h)
	t.mu.Unlock()
	if e == nil {
		return fmt.Errorf("%w: %d (never created or already destroyed)", errBadHandle, h)
	}
	e.mu.Lock()
	held := e.r.IndexBytes()
	e.r = nil
	e.mu.Unlock()
	if held >= releaseMinBytes { // its index is garbage now
		release.request()
	}
	return nil
}
