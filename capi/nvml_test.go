package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

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
	first, _ := c.get(monitorKey{"GPU-0", time.Second}, open)
	again, _ := c.get(monitorKey{"GPU-0", time.Second}, open)
	if first != again || opens != 1 {
		t.Errorf("a hit made a new monitor (opens %d)", opens)
	}
	for i := range 1000 {
		if _, err := c.get(monitorKey{fmt.Sprint("GPU-", i%7), time.Duration(i) * time.Millisecond}, open); err != nil {
			t.Fatal(err)
		}
		if n := c.len(); n > 4 {
			t.Fatalf("after %d keys the cache holds %d monitors, want at most 4", i+1, n)
		}
	}
	boom := errors.New("no such GPU")
	if _, err := c.get(monitorKey{"GPU-x", 0}, func() (*nvml.Monitor, error) { return nil, boom }); err != boom {
		t.Errorf("get = %v, want the open error", err)
	}
	if _, ok := c.m[monitorKey{"GPU-x", 0}]; ok {
		t.Error("a failed open was cached")
	}
	c.clear()
	if c.len() != 0 {
		t.Errorf("clear left %d monitors", c.len())
	}
	if monitors.limit != maxMonitors {
		t.Errorf("the library's cache has limit %d, want maxMonitors %d", monitors.limit, maxMonitors)
	}
}
