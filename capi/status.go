package main

/*
#include "adprouter.h"
*/
import "C"

import (
	"errors"
	"fmt"

	"github.com/adprouter/adprouter/kvsize"
	"github.com/adprouter/adprouter/nvml"
	"github.com/adprouter/adprouter/router"
)

// Status codes of adprouter.h that the Go side names.
const (
	statusOK              = C.ADPR_OK
	statusInvalidArgument = C.ADPR_ERR_INVALID_ARGUMENT
	statusInvalidHandle   = C.ADPR_ERR_INVALID_HANDLE
	statusConfig          = C.ADPR_ERR_CONFIG
	statusInternal        = C.ADPR_ERR_INTERNAL
)

// The C boundary's own sentinel errors; the other packages have theirs.
var (
	// errInvalidArgument: an argument of a C call was NULL, out of range or
	// malformed (argError).
	errInvalidArgument = errors.New("invalid argument")
	// errBadHandle: no router has that handle.
	errBadHandle = errors.New("invalid router handle")
	// errInternal: a bug, or a router poisoned by one.
	errInternal = errors.New("internal error")
	// errShortBuffer: an output buffer was smaller than the result; the
	// totals were written, the buffers were not (shortError).
	errShortBuffer = errors.New("output buffer too small")
)

// statuses is the one table from errors to the statuses of adprouter.h:
// every package reports failures as errors wrapping its documented sentinel
// errors, and the first sentinel that errors.Is finds decides the status.
// An error that wraps none of them is a bug: ADPR_ERR_INTERNAL.
var statuses = []struct {
	err    error
	status C.adpr_status
}{
	{errInvalidArgument, statusInvalidArgument},
	{errBadHandle, statusInvalidHandle},
	{errInternal, statusInternal},
	{errShortBuffer, C.ADPR_ERR_SHORT_BUFFER},
	{router.ErrInvalidConfig, statusConfig},
	{router.ErrInvalidInput, statusInvalidArgument},
	{kvsize.ErrInvalid, statusInvalidArgument},
	{nvml.ErrUnavailable, C.ADPR_ERR_NVML_UNAVAILABLE},
	{nvml.ErrGPULost, C.ADPR_ERR_GPU_LOST},
	{nvml.ErrNotSupported, C.ADPR_ERR_NOT_SUPPORTED},
	{nvml.ErrNoPermission, C.ADPR_ERR_NO_PERMISSION},
	{nvml.ErrNotFound, C.ADPR_ERR_NOT_FOUND},
	{nvml.ErrInvalidArgument, statusInvalidArgument},
	{nvml.ErrUnknown, C.ADPR_ERR_NVML},
}

// statusOf maps an error to its status code.
func statusOf(err error) C.adpr_status {
	if err == nil {
		return statusOK
	}
	for _, s := range statuses {
		if errors.Is(err, s.err) {
			return s.status
		}
	}
	return statusInternal
}

// statusError is an error of this package: a message that says what was
// wrong and what was expected, classified by one of the sentinels above.
type statusError struct {
	sentinel error
	msg      string
}

func (e *statusError) Error() string { return e.msg }
func (e *statusError) Unwrap() error { return e.sentinel }

// argError reports a bad argument of a C call.
func argError(format string, args ...any) error {
	return &statusError{errInvalidArgument, fmt.Sprintf(format, args...)}
}

// shortError reports an output buffer smaller than the result (the header's
// buffer convention).
func shortError(format string, args ...any) error {
	return &statusError{errShortBuffer, fmt.Sprintf(format, args...)}
}
