package kvsize_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/adprouter/adprouter/kvsize"
)

// The checks shared by the table tests of Guard, KVShape.BytesPerToken and
// SizeKV: every entry point returns a value and an error, and fails the
// same way.

// wantValue fails t unless call (its text, for the message) returned want
// and no error.
func wantValue[T any](t *testing.T, call string, got T, err error, want T) {
	t.Helper()
	require.NoError(t, err, call)
	assert.Equal(t, want, got, call)
}

// wantInvalid fails t unless call returned an error that wraps
// kvsize.ErrInvalid and mentions want, with the zero value beside it.
func wantInvalid[T any](t *testing.T, call string, got T, err error, want string) {
	t.Helper()
	require.ErrorIs(t, err, kvsize.ErrInvalid, "%s = %+v, %v", call, got, err)
	assert.ErrorContains(t, err, want, call)
	assert.Zero(t, got, "%s returned a value with its error, want the zero value", call)
}
