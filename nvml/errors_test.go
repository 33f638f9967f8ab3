package nvml

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSentinelFor(t *testing.T) {
	tests := []struct {
		ret        int
		duringInit bool
		want       error
	}{
		{nvmlErrLibraryNotFound, true, ErrUnavailable},
		{nvmlErrDriverNotLoaded, true, ErrUnavailable},
		{nvmlErrUninitialized, false, ErrUnavailable},
		{nvmlErrLibRMVersionMismatch, true, ErrUnavailable},
		{nvmlErrFunctionNotFound, true, ErrUnavailable},
		{nvmlErrFunctionNotFound, false, ErrNotSupported},
		{nvmlErrNotSupported, false, ErrNotSupported},
		{nvmlErrNoPermission, true, ErrNoPermission},
		{nvmlErrNoPermission, false, ErrNoPermission},
		{nvmlErrNotFound, false, ErrNotFound},
		{nvmlErrGPUNotFound, false, ErrNotFound},
		{nvmlErrInvalidArgument, false, ErrInvalidArgument},
		{nvmlErrGPUIsLost, false, ErrGPULost},
		{nvmlErrResetRequired, false, ErrGPULost},
		{nvmlErrArgVersionMismatch, false, ErrUnknown},
		{999, false, ErrUnknown},
		{12345, false, ErrUnknown},
	}
	for _, tt := range tests {
		assert.Same(t, tt.want, sentinelFor(tt.ret, tt.duringInit), "sentinelFor(%d, init=%v)", tt.ret, tt.duringInit)
	}
}

// sentinels lists every sentinel error of the package.
var sentinels = []error{ErrUnavailable, ErrGPULost, ErrNotSupported, ErrNoPermission,
	ErrNotFound, ErrInvalidArgument, ErrUnknown}

// Every error the package makes wraps exactly one sentinel, however it is
// wrapped further.
func TestErrorsWrapOneSentinel(t *testing.T) {
	tests := []struct {
		err  error
		want error
	}{
		{&Error{Op: "nvmlInit", Return: 12, Err: ErrUnavailable}, ErrUnavailable},
		{fmt.Errorf("wrapped: %w", &Error{Op: "x", Return: 15, Err: ErrGPULost}), ErrGPULost},
		{invalidf("x"), ErrInvalidArgument},
	}
	for _, tt := range tests {
		for _, s := range sentinels {
			assert.Equal(t, s == tt.want, errors.Is(tt.err, s), "errors.Is(%v, %v)", tt.err, s)
		}
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		err  *Error
		want string
	}{
		{&Error{Op: "nvmlDeviceGetMemoryInfo_v2", Device: `uuid "GPU-1"`, Return: 15, Text: "GPU is lost", Err: ErrGPULost},
			`nvml: nvmlDeviceGetMemoryInfo_v2 on uuid "GPU-1": GPU lost (NVML error 15: GPU is lost)`},
		{&Error{Op: "ReadMemory", Text: "not initialised; call Init first", Err: ErrUnavailable},
			"nvml: ReadMemory: NVML unavailable (not initialised; call Init first)"},
		{&Error{Op: "x", Err: ErrUnknown}, "nvml: x: NVML error"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.err.Error(), "Error() of a failed %s", tt.err.Op)
	}
}
