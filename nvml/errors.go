package nvml

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them; test with errors.Is. (The C ABI maps them to its ADPR_ERR_* statuses
// in capi's one status table.)
var (
	// ErrUnavailable means NVML cannot be used at all: no driver library
	// (libnvidia-ml.so.1) on this machine, the kernel driver not loaded,
	// a driver too old to have a required function, NVML not initialised
	// (no Init, or Shutdown already called), or a build without cgo.
	// Routing keeps working without memory budgets.
	ErrUnavailable = errors.New("NVML unavailable")
	// ErrGPULost means the GPU fell off the bus or needs a reset
	// (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED).
	ErrGPULost = errors.New("GPU lost")
	// ErrNotSupported means the device or driver does not support the query
	// (NVML_ERROR_NOT_SUPPORTED, or a function missing after Init).
	ErrNotSupported = errors.New("not supported by this GPU or driver")
	// ErrNoPermission means the caller may not make the query
	// (NVML_ERROR_NO_PERMISSION).
	ErrNoPermission = errors.New("insufficient permissions")
	// ErrNotFound means no GPU matches the device reference
	// (NVML_ERROR_NOT_FOUND, NVML_ERROR_GPU_NOT_FOUND, or an index not below
	// the device count).
	ErrNotFound = errors.New("device not found")
	// ErrInvalidArgument means an argument was out of range or malformed,
	// whether this package or NVML noticed (NVML_ERROR_INVALID_ARGUMENT).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnknown is any other NVML failure; the [*Error] carries NVML's code.
	ErrUnknown = errors.New("NVML error")
)

// Error is a failed NVML call. It wraps one of the sentinel errors.
type Error struct {
	// Op is the NVML function that failed, e.g. "nvmlDeviceGetMemoryInfo_v2",
	// or the step of this package that refused, e.g. "ReadMemory".
	Op string
	// Device names the device the call was about, e.g. `uuid "GPU-…"`,
	// or is empty for calls about the library as a whole.
	Device string
	// Return is NVML's return code (nvmlReturn_t), or 0 when the error was
	// raised by this package rather than returned by NVML.
	Return int
	// Text is NVML's description of Return, or this package's explanation.
	Text string
	// Err is the sentinel error that classifies the failure.
	Err error
}

// Error returns, e.g.,
// `nvml: nvmlDeviceGetMemoryInfo_v2 on uuid "GPU-1": GPU lost (NVML error 15: GPU is lost)`.
func (e *Error) Error() string {
	s := "nvml: " + e.Op
	if e.Device != "" {
		s += " on " + e.Device
	}
	s += ": " + e.Err.Error()
	switch {
	case e.Return != 0:
		s += fmt.Sprintf(" (NVML error %d: %s)", e.Return, e.Text)
	case e.Text != "":
		s += " (" + e.Text + ")"
	}
	return s
}

// Unwrap returns the sentinel error.
func (e *Error) Unwrap() error { return e.Err }

// NVML return codes this package interprets (nvml.h, nvmlReturn_t).
const (
	nvmlSuccess                 = 0
	nvmlErrUninitialized        = 1
	nvmlErrInvalidArgument      = 2
	nvmlErrNotSupported         = 3
	nvmlErrNoPermission         = 4
	nvmlErrNotFound             = 6
	nvmlErrDriverNotLoaded      = 9
	nvmlErrLibraryNotFound      = 12
	nvmlErrFunctionNotFound     = 13
	nvmlErrGPUIsLost            = 15
	nvmlErrResetRequired        = 16
	nvmlErrLibRMVersionMismatch = 18
	nvmlErrArgVersionMismatch   = 25
	nvmlErrGPUNotFound          = 28
)

// sentinelFor classifies an NVML return code. During Init, a missing
// function means the driver library is unusable (ErrUnavailable); after Init
// it means the driver is too old for that one query (ErrNotSupported).
func sentinelFor(ret int, duringInit bool) error {
	switch ret {
	case nvmlErrUninitialized, nvmlErrDriverNotLoaded, nvmlErrLibraryNotFound, nvmlErrLibRMVersionMismatch:
		return ErrUnavailable
	case nvmlErrFunctionNotFound:
		if duringInit {
			return ErrUnavailable
		}
		return ErrNotSupported
	case nvmlErrNotSupported:
		return ErrNotSupported
	case nvmlErrNoPermission:
		return ErrNoPermission
	case nvmlErrNotFound, nvmlErrGPUNotFound:
		return ErrNotFound
	case nvmlErrInvalidArgument:
		return ErrInvalidArgument
	case nvmlErrGPUIsLost, nvmlErrResetRequired:
		return ErrGPULost
	default:
		return ErrUnknown
	}
}

// invalidf returns an error wrapping ErrInvalidArgument whose text says what
// was wrong and what was expected.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("nvml: %w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}
