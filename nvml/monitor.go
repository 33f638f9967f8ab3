package nvml

import (
	"sync"
	"time"

	"go.uber.org/atomic"
)

// DefaultMinInterval is the shortest time between two NVML reads of one
// [Monitor] unless configured otherwise: at most 4 reads per second. A read
// costs about 10 µs and takes a driver lock, so never read per request.
const DefaultMinInterval = 250 * time.Millisecond

// Reading is a memory reading and when it was taken.
type Reading struct {
	// Memory is the reading.
	Memory MemoryInfo
	// At is the Monitor clock's time of the NVML read.
	At time.Time
	// Cached is true when Read returned an earlier read instead of
	// polling NVML.
	Cached bool
}

// Monitor rate-limits reads of one GPU's memory: it polls its Source at most
// once per MinInterval and otherwise returns the cached reading. Failed reads
// are cached too, so a lost GPU is not hammered either.
//
// Use it in the executor's loop to feed kvsize.Guard, never inside a routing
// decision: readings differ between ranks and over time, and routing must
// be a pure function of the allgathered rank states.
//
// Set the fields before the first Read; a Monitor is safe for concurrent use
// after that.
type Monitor struct {
	// Source is read for fresh figures, typically a Device.
	Source MemoryReader
	// MinInterval is the shortest time between two reads of Source;
	// 0 means DefaultMinInterval, a negative value disables the limit.
	MinInterval time.Duration
	// Now is the clock; nil means time.Now. Tests inject a fake clock here.
	Now func() time.Time

	mu     sync.Mutex // serialises reads; guards polled, last and err
	polled bool       // a read has been made
	last   Reading
	err    error
	polls  atomic.Uint64 // reads of Source, counted under mu, read without it
}

// NewMonitor returns a Monitor of src that reads it at most once per
// minInterval (0 means DefaultMinInterval).
func NewMonitor(src MemoryReader, minInterval time.Duration) *Monitor {
	return &Monitor{Source: src, MinInterval: minInterval}
}

// Read returns the latest reading: a fresh one from Source when none was
// taken yet or MinInterval has passed since the last, otherwise the cached
// one (or the cached error) with Cached set. A clock that goes backwards
// counts as time passed.
func (m *Monitor) Read() (Reading, error) {
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	interval := m.MinInterval
	if interval == 0 {
		interval = DefaultMinInterval
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	t := now()
	if m.polled {
		age := t.Sub(m.last.At)
		if age >= 0 && age < interval {
			r := m.last
			r.Cached = true
			return r, m.err
		}
	}
	info, err := m.Source.MemoryInfo()
	m.polls.Inc()
	m.polled = true
	m.last = Reading{Memory: info, At: t}
	m.err = err
	return m.last, err
}

// Polls returns how many times Source has been read. It never waits for a
// Read in progress.
func (m *Monitor) Polls() uint64 { return m.polls.Load() }
