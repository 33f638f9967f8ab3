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

// minPointer is the lowest address a caller's pointer may hold: the Go
// runtime's minLegalPointer. A smaller nonzero value ("near NULL", such as a
// field of a NULL struct pointer) in a pointer-typed stack slot is memory
// corruption to the runtime, which aborts the process when it copies that
// stack; it copies a stack whenever one grows, recovering a fault included.
// So a near-NULL caller pointer is refused before Go holds it: abi.c
// refuses the arguments (calling adprgo_refuse_pointer) and passes a
// near-NULL err buffer as NULL, and the pointers inside the caller's structs
// are checked with nearNull as they are read.
const minPointer = 4096

// nearNull reports whether the address p, a pointer read from a C struct
// and converted to an integer at once, is near NULL: 1..minPointer-1.
func nearNull(p uintptr) bool {
	return p != 0 && p < minPointer
}

// nearNullError is the internal error (the header's class for faults on
// wild caller pointers) for the near-NULL pointer what at address p; p is
// an integer so that the message holds no pointer either.
func nearNullError(what string, p uintptr) error {
	return &statusError{errInternal, fmt.Sprintf(
		"%s = %#x is not a valid address (near NULL: a field of a NULL struct pointer?)", what, p)}
}

// adprgo_refuse_pointer is how abi.c refuses export fn's near-NULL argument
// arg (both static C strings) at address p: ADPR_ERR_INTERNAL, with the
// message written to ebuf as every export writes it.
//
//export adprgo_refuse_pointer
func adprgo_refuse_pointer(fn, arg *C.char, p C.uintptr_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	name, what := C.GoString(fn), C.GoString(arg)
	return guard(name, ebuf, elen, func() error { return nearNullError(what, uintptr(p)) })
}
