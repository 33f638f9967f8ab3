package main

import (
	"errors"
	"testing"

	"github.com/adprouter/adprouter/kvsize"
	"github.com/adprouter/adprouter/router"
)

func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, int(statusOK)},
		{argError("x"), int(statusInvalidArgument)},
		{router.ErrInvalidInput, int(statusInvalidArgument)},
		{kvsize.ErrInvalid, int(statusInvalidArgument)},
		{router.ErrInvalidConfig, int(statusConfig)},
		{errBadHandle, int(statusInvalidHandle)},
		{errPoisoned, int(statusInternal)},
		{errors.New("anything else"), int(statusInternal)},
	} {
		if got := int(statusOf(tc.err)); got != tc.want {
			t.Errorf("statusOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
