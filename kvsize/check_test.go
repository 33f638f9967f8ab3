package kvsize_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/kvsize"
)

// The checks shared by the table tests of Guard, KVShape.BytesPerToken and
// SizeKV: every entry point returns a value and an error, and fails the
// same way.

// wantValue fails t unless call (its text, for the message) returned want
// and no error.
func wantValue[T comparable](t *testing.T, call string, got T, err error, want T) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if got != want {
		t.Errorf("%s =\n%+v\nwant\n%+v", call, got, want)
	}
}

// wantInvalid fails t unless call returned an error that wraps
// kvsize.ErrInvalid and mentions want, with the zero value beside it.
func wantInvalid[T comparable](t *testing.T, call string, got T, err error, want string) {
	t.Helper()
	if !errors.Is(err, kvsize.ErrInvalid) {
		t.Fatalf("%s = %+v, %v; want an error wrapping ErrInvalid", call, got, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: error %q does not mention %q", call, err, want)
	}
	var zero T
	if got != zero {
		t.Errorf("%s returned %+v with its error, want the zero value", call, got)
	}
}
