package nvml_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/adprouter/adprouter/kvsize"
	"github.com/adprouter/adprouter/nvml"
	"github.com/adprouter/adprouter/nvml/nvmltest"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestMonitorRateLimit(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	dev := nvmltest.NewDevice("GPU-0", nvml.MemoryInfo{TotalBytes: 100, FreeBytes: 60})
	m := nvml.NewMonitor(dev, 0)
	m.Now = clock.Now

	steps := []struct {
		advance    time.Duration
		setFree    uint64 // 0: leave
		wantFree   uint64
		wantCached bool
		wantPolls  uint64
	}{
		{0, 0, 60, false, 1},                            // first read polls
		{100 * time.Millisecond, 50, 60, true, 1},       // 100 ms: cached, new figure unseen
		{149 * time.Millisecond, 0, 60, true, 1},        // 249 ms: still cached
		{1 * time.Millisecond, 0, 50, false, 2},         // 250 ms = DefaultMinInterval: polls
		{0, 40, 50, true, 2},                            // same instant: cached
		{-time.Second, 0, 40, false, 3},                 // clock went back: polls
		{nvml.DefaultMinInterval - 1, 30, 40, true, 3},  // just under the interval
		{10 * nvml.DefaultMinInterval, 0, 30, false, 4}, // long after
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		if s.setFree != 0 {
			dev.SetMemory(nvml.MemoryInfo{TotalBytes: 100, FreeBytes: s.setFree})
		}
		r, err := m.Read()
		require.NoError(t, err, "step %d: Read", i)
		assert.Equal(t, s.wantFree, r.Memory.FreeBytes, "step %d: free bytes", i)
		assert.Equal(t, s.wantCached, r.Cached, "step %d: cached", i)
		assert.Equal(t, s.wantPolls, m.Polls(), "step %d: polls", i)
		if !s.wantCached {
			assert.WithinDuration(t, clock.Now(), r.At, 0, "step %d: a fresh reading is taken now", i)
		}
	}
	assert.Equal(t, dev.Reads(), int(m.Polls()), "device reads against the monitor's polls")
}

func TestMonitorCachesErrors(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	dev := nvmltest.NewDevice("GPU-0", nvml.MemoryInfo{FreeBytes: 7})
	m := &nvml.Monitor{Source: dev, MinInterval: time.Second, Now: clock.Now}

	dev.SetError(nvml.ErrGPULost)
	for i := 0; i < 3; i++ {
		_, err := m.Read()
		require.ErrorIs(t, err, nvml.ErrGPULost, "read %d", i)
	}
	assert.Equal(t, 1, dev.Reads(), "reads of a failing device within one interval")
	dev.SetError(nil)
	clock.Advance(time.Second)
	r, err := m.Read()
	assert.NoError(t, err, "read after recovery")
	assert.Equal(t, uint64(7), r.Memory.FreeBytes, "free bytes after recovery")
	assert.False(t, r.Cached, "the reading after recovery is fresh")
}

func TestMonitorNoLimit(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	dev := nvmltest.NewDevice("GPU-0", nvml.MemoryInfo{})
	m := &nvml.Monitor{Source: dev, MinInterval: -1, Now: clock.Now}
	for i := 0; i < 5; i++ {
		r, err := m.Read()
		require.NoError(t, err, "read %d", i)
		require.False(t, r.Cached, "read %d: want fresh", i)
	}
	assert.Equal(t, uint64(5), m.Polls(), "Polls")
}

func TestMonitorConcurrent(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	dev := nvmltest.NewDevice("GPU-0", nvml.MemoryInfo{FreeBytes: 1})
	m := &nvml.Monitor{Source: dev, Now: clock.Now}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if _, err := m.Read(); !assert.NoError(t, err) {
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, uint64(1), m.Polls(), "polls of 800 concurrent reads at one instant")
}

func ExampleMonitor() {
	// In the executor's loop, not inside routing: read the GPU at most
	// 4 times a second and turn the reading into an admissible KV size.
	lib := nvmltest.New(nvmltest.NewDevice("GPU-0", nvml.MemoryInfo{TotalBytes: 80 << 30, FreeBytes: 1 << 30}))
	c := nvml.NewClient(lib) // nvml.NewClient(nvml.NewLibrary()) on a GPU machine
	if err := c.Init(); err != nil {
		fmt.Println("no NVML, no guard:", err)
		return
	}
	defer c.Shutdown()
	dev, err := c.Device(nvml.ByUUID("GPU-0"))
	if err != nil {
		panic(err)
	}
	mon := nvml.NewMonitor(dev, nvml.DefaultMinInterval)

	r, err := mon.Read()
	if err != nil {
		panic(err)
	}
	a, err := kvsize.Guard(kvsize.GuardInput{
		CapacityTokens:  500000, // from the engine's KV pool
		FreeTokens:      120000,
		DeviceFreeBytes: r.Memory.FreeBytes,
		GuardBandBytes:  2 << 30,
		BytesPerToken:   131072,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(a.FreeTokens, a.MemoryPressure)
	// Output: 111808 true
}
