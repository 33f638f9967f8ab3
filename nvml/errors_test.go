package nvml

import (
	"errors"
	"fmt"
	"testing"
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
		if got := sentinelFor(tt.ret, tt.duringInit); got != tt.want {
			t.Errorf("sentinelFor(%d, init=%v) = %v, want %v", tt.ret, tt.duringInit, got, tt.want)
		}
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want Code
	}{
		{nil, CodeOK},
		{ErrUnavailable, CodeUnavailable},
		{&Error{Op: "nvmlInit", Return: 12, Err: ErrUnavailable}, CodeUnavailable},
		{fmt.Errorf("wrapped: %w", &Error{Op: "x", Return: 15, Err: ErrGPULost}), CodeGPULost},
		{ErrNotSupported, CodeNotSupported},
		{ErrNoPermission, CodeNoPermission},
		{ErrNotFound, CodeNotFound},
		{invalidf("x"), CodeInvalidArgument},
		{ErrUnknown, CodeUnknown},
		{errors.New("foreign"), CodeUnknown},
	}
	for _, tt := range tests {
		if got := CodeOf(tt.err); got != tt.want {
			t.Errorf("CodeOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestCodeStable(t *testing.T) {
	// The numbers are part of the C ABI: they must never change.
	want := map[Code]error{0: nil, 1: ErrUnavailable, 2: ErrGPULost, 3: ErrNotSupported,
		4: ErrNoPermission, 5: ErrNotFound, 6: ErrInvalidArgument, 7: ErrUnknown}
	for c, e := range want {
		if c.Err() != e {
			t.Errorf("Code(%d).Err() = %v, want %v", c, c.Err(), e)
		}
		if e != nil && CodeOf(e) != c {
			t.Errorf("CodeOf(%v) = %d, want %d", e, CodeOf(e), c)
		}
	}
	if Code(8).Err() != ErrUnknown || Code(-1).Err() != ErrUnknown {
		t.Error("out-of-range codes should map to ErrUnknown")
	}
	if CodeOK.String() != "ok" || CodeGPULost.String() != "GPU lost" {
		t.Errorf("String: %q, %q", CodeOK.String(), CodeGPULost.String())
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
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() =\n%s\nwant\n%s", got, tt.want)
		}
	}
}
