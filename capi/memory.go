package main

import (
	"runtime/debug"
	"sync"
)

// Returning the prefix index's growth to the host.
//
// The index grows its arrays by doubling, up to its bound: each growth copies
// an array into one twice its size and leaves the old one to the garbage
// collector. Go frees that memory but keeps it in its heap until the heap
// outgrows its GOGC goal, twice the live heap by default, so that a host
// process would stay up to 1.7 times as large as the index_bytes it is shown
// (measured: 106 MB resident for a 63 MB index). The library's heap is little
// else than its routers' tables, and once an index is full it never grows
// again, so the library hands such garbage back to the operating system:
// after a call that grew a router's index_bytes (router.IndexBytes, which
// rises only when an array doubles) by releaseMinBytes or more since the last
// release, and after destroying a router that held as much, a background
// goroutine runs debug.FreeOSMemory (a garbage collection that returns every
// free page). It runs off the caller's thread and touches no router, so
// decisions neither wait for it nor depend on it.

// releaseMinBytes is the garbage, in bytes, that asks for a release: the
// doublings of a large index's arrays, never the small ones of a router's
// first decisions.
const releaseMinBytes = 1 << 20

// releaser runs debug.FreeOSMemory in the background when asked: at most
// one goroutine at a time, which releases once more if asked meanwhile.
type releaser struct {
	mu      sync.Mutex
	idle    sync.Cond // broadcast when the goroutine stops
	pending bool      // asked since the running release began
	running bool      // a goroutine is releasing
	runs    int       // releases done
	free    func()    // debug.FreeOSMemory; tests count calls instead
}

var release = newReleaser(debug.FreeOSMemory)

func newReleaser(free func()) *releaser {
	r := &releaser{free: free}
	r.idle.L = &r.mu
	return r
}

// request asks for a release and returns at once.
func (r *releaser) request() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = true
	if !r.running {
		r.running = true
		go r.run()
	}
}

func (r *releaser) run() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.pending {
		r.pending = false
		r.mu.Unlock()
		r.freeOnce()
		r.mu.Lock()
		r.runs++
	}
	r.running = false
	r.idle.Broadcast()
}

// freeOnce calls free; a panic there (there is none in debug.FreeOSMemory)
// must not end the host from a goroutine no guard covers.
func (r *releaser) freeOnce() {
	defer func() { _ = recover() }()
	r.free()
}

// wait blocks until every release asked for so far is done.
func (r *releaser) wait() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.running {
		r.idle.Wait()
	}
}

// noteIndexGrowth is called with e locked after each call on it: it asks for
// a release once the router's index_bytes has grown by releaseMinBytes since
// the last one (or since the router was created). Reading it costs a few
// loads.
func (e *entry) noteIndexGrowth() {
	if e.r == nil {
		return
	}
	b := e.r.IndexBytes()
	if b-e.released >= releaseMinBytes {
		e.released = b
		release.request()
	}
}
