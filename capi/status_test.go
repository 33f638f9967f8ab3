package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/adprouter/adprouter/kvsize"
	"github.com/adprouter/adprouter/nvml"
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
		{nvml.ErrUnavailable, 5}, {nvml.ErrGPULost, 6}, {nvml.ErrNotSupported, 7},
		{nvml.ErrNoPermission, 8}, {nvml.ErrNotFound, 9}, {nvml.ErrInvalidArgument, int(statusInvalidArgument)},
		{nvml.ErrUnknown, 10},
		{&nvml.Error{Op: "nvmlDeviceGetMemoryInfo_v2", Return: 999, Err: nvml.ErrUnknown}, 10},
		{fmt.Errorf("wrapped twice: %w", fmt.Errorf("%w", router.ErrInvalidInput)), int(statusInvalidArgument)},
		{errors.New("anything else"), int(statusInternal)},
	} {
		assert.Equal(t, tc.want, int(statusOf(tc.err)), "statusOf(%v)", tc.err)
	}
}
