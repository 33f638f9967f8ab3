package nvml_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
		if err != nil {
			t.Fatalf("step %d: Read: %v", i, err)
		}
		if r.Memory.FreeBytes != s.wantFree || r.Cached != s.wantCached || m.Polls() != s.wantPolls {
			t.Errorf("step %d: free %d cached %v polls %d; want %d %v %d",
				i, r.Memory.FreeBytes, r.Cached, m.Polls(), s.wantFree, s.wantCached, s.wantPolls)
		}
		if !s.wantCached && !r.At.Equal(clock.Now()) {
			t.Errorf("step %d: fresh reading At %v, want now %v", i, r.At, clock.Now())
		}
	}
	if dev.Reads() != int(m.Polls()) {
		t.Errorf("device read %d times, monitor counted %d polls", dev.Reads(), m.Polls())
	}
}

func TestMonitorCachesErrors(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	dev := nvmltest.NewDevice("GPU-0", nvml.MemoryInfo{FreeBytes: 7})
	m := &nvml.Monitor{Source: dev, MinInterval: time.Second, Now: clock.Now}

	dev.SetError(nvml.ErrGPULost)
	for i := 0; i < 3; i++ {
		if _, err := m.Read(); !errors.Is(err, nvml.ErrGPULost) {
			t.Fatalf("read %d: error %v, want ErrGPULost", i, err)
		}
	}
	if dev.Reads() != 1 {
		t.Errorf("a failing device was read %d times within one interval, want 1", dev.Reads())
	}
	dev.SetError(nil)
	clock.Advance(time.Second)
	r, err := m.Read()
	if err != nil || r.Memory.FreeBytes != 7 || r.Cached {
		t.Errorf("after recovery: %+v, %v; want a fresh reading of 7 free bytes", r, err)
	}
}

func TestMonitorNoLimit(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	dev := nvmltest.NewDevice("GPU-0", nvml.MemoryInfo{})
	m := &nvml.Monitor{Source: dev, MinInterval: -1, Now: clock.Now}
	for i := 0; i < 5; i++ {
		if r, err := m.Read(); err != nil || r.Cached {
			t.Fatalf("read %d: %+v, %v; want fresh", i, r, err)
		}
	}
	if m.Polls() != 5 {
		t.Errorf("Polls() = %d, want 5", m.Polls())
	}
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
				if _, err := m.Read(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if m.Polls() != 1 {
		t.Errorf("800 concurrent reads at one instant polled %d times, want 1", m.Polls())
	}
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
