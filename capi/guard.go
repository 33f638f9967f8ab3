package main

/*
#include "adprouter.h"
*/
import "C"

import (
	"fmt"
	"runtime/debug"
	"unsafe"

	"github.com/adprouter/adprouter/internal/limits"
)

// errPoisoned refuses calls on a router whose state a recovered panic may
// have left half-updated.
var errPoisoned = &statusError{errInternal,
	"router is unusable after an earlier internal error: destroy it and create a new one"}

// guard runs body, the whole work of the export called name, and turns its
// outcome into the status the export returns: ADPR_OK for nil, the error's
// status (its message copied into ebuf) otherwise. It is the one place where
// the library recovers panics: a Go panic anywhere in body, including a
// fault on a wild or near-NULL caller pointer (SetPanicOnFault makes those
// recoverable), becomes ADPR_ERR_INTERNAL with a message, never a dead host.
//
// recover only works in a function deferred directly by the panicking
// function's caller chain, so the deferred closure below must call it
// itself; every export goes through guard, and capi_test.go proves it for
// each one with the adpr_faultinject build.
func guard(name string, ebuf *C.char, elen C.size_t, body func() error) (status C.adpr_status) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			status = statusInternal
			writeError(ebuf, elen, fmt.Sprintf("internal error in %s (please report): %v", name, p))
		}
	}()
	faultPoint(name)
	if err := body(); err != nil {
		status = statusOf(err)
		writeError(ebuf, elen, err.Error())
		return status
	}
	return statusOK
}

// guardRouter is guard for an export that works on router h: body runs with
// h's entry locked (calls on one router are serialised). A router poisoned by
// an earlier panic is refused with ADPR_ERR_INTERNAL; a panic in body poisons
// it, since its state may now be half-updated. Only destroy works on a
// poisoned router.
func guardRouter(name string, h C.adpr_router, ebuf *C.char, elen C.size_t, body func(e *entry) error) C.adpr_status {
	return guard(name, ebuf, elen, func() error { return withRouter(name, uint64(h), body) })
}

// withRouter is guardRouter's work inside guard, in Go types: body on h's
// entry, locked; then the entry's index growth is noted (see memory.go).
func withRouter(name string, h uint64, body func(e *entry) error) error {
	e, err := handles.acquire(h)
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	if e.poisoned {
		return errPoisoned
	}
	done := false
	defer func() {
		if !done { // body panicked: the panic goes on to guard
			e.poisoned = true
		}
	}()
	faultPoint(name + "/locked")
	err = body(e)
	done = true
	e.noteIndexGrowth()
	return err
}

// writeError copies msg, NUL-terminated, into the caller's buffer of n
// bytes: at most ADPR_MESSAGE_MAX bytes of it (a longer message is cut there
// and ends in "..."), truncated to fit a smaller buffer. A buffer the caller
// declared but does not own is ignored rather than allowed to fault: this
// runs while a recovered panic is being reported, where a second panic would
// reach the host.
func writeError(buf *C.char, n C.size_t, msg string) {
	if buf == nil || n == 0 {
		return
	}
	defer func() { _ = recover() }()
	if len(msg) > limits.MessageMax-1 { // the header's promise: ADPR_MESSAGE_MAX holds any message
		msg = msg[:limits.MessageMax-4] + "..."
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(min(n, limits.MessageMax)))
	k := copy(dst[:len(dst)-1], msg)
	dst[k] = 0
}
