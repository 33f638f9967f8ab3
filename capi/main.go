// Command capi is the C ABI of adprouter, built with
// go build -buildmode=c-shared into libadprouter.so. It holds only the
// exported adpr_* functions and what they need: the handle table, argument
// checking, C <-> Go conversion, panic recovery and error text. Routing lives
// in package router; the public contract is include/adprouter.h.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include -DADPR_BUILDING_LIBRARY
#include <stdlib.h>
#include "adprouter.h"
const char *capi_status_text(int32_t status);
const char *capi_version(void);
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/adprouter/adprouter/router"
)

func main() {}

// Status codes, mirrored from adprouter.h.
const (
	statusOK              = C.ADPR_OK
	statusInvalidArgument = C.ADPR_ERR_INVALID_ARGUMENT
	statusInvalidHandle   = C.ADPR_ERR_INVALID_HANDLE
	statusConfig          = C.ADPR_ERR_CONFIG
	statusInternal        = C.ADPR_ERR_INTERNAL
)

// callError is an error with the status code it maps to.
type callError struct {
	status C.adpr_status
	msg    string
}

func (e *callError) Error() string { return e.msg }

func argError(format string, args ...any) error {
	return &callError{statusInvalidArgument, fmt.Sprintf(format, args...)}
}

// statusOf maps an error to its status code.
func statusOf(err error) C.adpr_status {
	var ce *callError
	switch {
	case err == nil:
		return statusOK
	case errors.As(err, &ce):
		return ce.status
	case errors.Is(err, router.ErrInvalidConfig):
		return statusConfig
	case errors.Is(err, router.ErrInvalidInput):
		return statusInvalidArgument
	case errors.Is(err, errBadHandle):
		return statusInvalidHandle
	default:
		return statusInternal
	}
}

// writeError copies msg, truncated and NUL-terminated, into the caller's
// buffer.
func writeError(buf *C.char, n C.size_t, msg string) {
	if buf == nil || n == 0 {
		return
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(min(n, 1<<20)))
	k := copy(dst[:len(dst)-1], msg)
	dst[k] = 0
}

// finish turns the outcome of an exported call into its status, writing the
// message of a failure, and converts a panic into statusInternal (poisoning
// the router involved, if any) so that no Go panic ever reaches the host.
func finish(status *C.adpr_status, err *error, buf *C.char, n C.size_t, e *entry) {
	if p := recover(); p != nil {
		if e != nil {
			// The call's deferred unlock has run (defers are last in,
			// first out): take the lock to mark the router.
			e.mu.Lock()
			e.poisoned = true
			e.mu.Unlock()
		}
		*err = fmt.Errorf("internal error (please report): %v", p)
		*status = statusInternal
	} else {
		*status = statusOf(*err)
	}
	if *err != nil {
		writeError(buf, n, (*err).Error())
	}
}

//export adpr_abi_version
func adpr_abi_version() C.uint32_t { return C.ADPR_ABI_VERSION }

//export adpr_version
func adpr_version() *C.char { return C.capi_version() }

//export adpr_strerror
func adpr_strerror(status C.adpr_status) *C.char { return C.capi_status_text(status) }

//export adpr_router_create
func adpr_router_create(opts *C.adpr_option, nopts C.int32_t, out *C.adpr_router, ebuf *C.char, elen C.size_t) (status C.adpr_status) {
	var err error
	defer finish(&status, &err, ebuf, elen, nil)
	if out == nil {
		err = argError("out is NULL, want a pointer to an adpr_router")
		return
	}
	if nopts < 0 || (nopts > 0 && opts == nil) {
		err = argError("options = %p with num_options = %d, want a non-NULL array when num_options > 0", opts, nopts)
		return
	}
	kv := make([][2]string, 0, int(nopts))
	for i, o := range unsafe.Slice(opts, int(nopts)) {
		if o.key == nil || o.value == nil {
			err = argError("options[%d] has a NULL key or value", i)
			return
		}
		kv = append(kv, [2]string{C.GoString(o.key), C.GoString(o.value)})
	}
	var cfg router.Config
	if cfg, err = parseOptions(kv); err != nil {
		return
	}
	var r *router.Router
	if r, err = router.New(cfg); err != nil {
		return
	}
	*out = C.adpr_router(handles.add(r))
	return
}

//export adpr_router_destroy
func adpr_router_destroy(h C.adpr_router) (status C.adpr_status) {
	var err error
	defer finish(&status, &err, nil, 0, nil)
	err = handles.remove(uint64(h))
	return
}

//export adpr_router_state_digest
func adpr_router_state_digest(h C.adpr_router, out *C.uint64_t) (status C.adpr_status) {
	var err error
	var e *entry
	defer func() { finish(&status, &err, nil, 0, e) }()
	if out == nil {
		err = argError("out is NULL, want a pointer to a uint64_t")
		return
	}
	if e, err = handles.acquire(uint64(h)); err != nil {
		return
	}
	defer e.mu.Unlock()
	*out = C.uint64_t(e.r.StateDigest())
	return
}
