package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/adprouter/adprouter/nvml"
)

// The monitor cache never holds more than its limit, however many distinct
// devices and intervals a host asks for; a hit returns the cached monitor; a
// failed open caches nothing; clear empties it.
func TestMonitorCacheBounded(t *testing.T) {
	c := monitorCache{limit: 4}
	opens := 0
	open := func() (*nvml.Monitor, error) {
		opens++
		return nvml.NewMonitor(nil, time.Second), nil
	}
	first, err := c.get(monitorKey{"GPU-0", time.Second}, open)
	require.NoError(t, err)
	again, err := c.get(monitorKey{"GPU-0", time.Second}, open)
	require.NoError(t, err)
	assert.Same(t, first, again, "a hit returns the cached monitor")
	assert.Equal(t, 1, opens, "opens after a miss and a hit")
	for i := range 1000 {
		_, err := c.get(monitorKey{fmt.Sprint("GPU-", i%7), time.Duration(i) * time.Millisecond}, open)
		require.NoError(t, err)
		require.LessOrEqual(t, c.len(), 4, "monitors cached after %d keys", i+1)
	}
	boom := errors.New("no such GPU")
	_, err = c.get(monitorKey{"GPU-x", 0}, func() (*nvml.Monitor, error) { return nil, boom })
	assert.Same(t, boom, err, "get returns the open error")
	assert.NotContains(t, c.m, monitorKey{"GPU-x", 0}, "a failed open was cached")
	c.clear()
	assert.Zero(t, c.len(), "monitors left by clear")
	assert.Equal(t, maxMonitors, monitors.limit, "the library's cache's limit")
}
