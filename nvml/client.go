package nvml

import "sync"

// Client adds reference counting and device lookup by [DeviceRef] to a
// [Library]. Init and Shutdown nest: the first Init initialises the
// library, the matching last Shutdown shuts it down, so independent users in
// one process (several routers, say) can each Init and Shutdown without
// tearing NVML down under the others. All methods are safe for concurrent
// use; queries never run concurrently with the library's Init or Shutdown.
type Client struct {
	lib  Library
	mu   sync.RWMutex // held for writing by Init and Shutdown
	refs int          // successful Inits minus Shutdowns
}

// NewClient returns a Client over lib, not yet initialised.
func NewClient(lib Library) *Client { return &Client{lib: lib} }

// Init initialises the library on the first call and counts later calls.
// A failed Init is not counted; it can be retried.
func (c *Client) Init() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs == 0 {
		if err := c.lib.Init(); err != nil {
			return err
		}
	}
	c.refs++
	return nil
}

// Shutdown undoes one successful Init, shutting the library down when the
// last one is undone. Without a matching Init it returns an error wrapping
// ErrUnavailable.
func (c *Client) Shutdown() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs == 0 {
		return errNotInitialized("Shutdown")
	}
	if c.refs == 1 {
		if err := c.lib.Shutdown(); err != nil {
			return err
		}
	}
	c.refs--
	return nil
}

// Initialized reports whether Init has succeeded more often than Shutdown.
func (c *Client) Initialized() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.refs > 0
}

func errNotInitialized(op string) error {
	return &Error{Op: op, Text: "not initialised; call Init first", Err: ErrUnavailable}
}

// DeviceCount returns the number of GPUs NVML sees on this machine.
func (c *Client) DeviceCount() (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.refs == 0 {
		return 0, errNotInitialized("DeviceCount")
	}
	return c.lib.DeviceCount()
}

// Device returns the GPU that ref selects. The Device stays usable while
// the Client is initialised; after the last Shutdown its calls fail with
// ErrUnavailable.
func (c *Client) Device(ref DeviceRef) (Device, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.refs == 0 {
		return nil, errNotInitialized("Device")
	}
	return Lookup(c.lib, ref)
}

// ReadMemory looks up the GPU that ref selects and reads its memory. Each
// call costs a driver round trip (about 10 µs under a driver lock); to read
// repeatedly, get the Device once and poll it through a [Monitor].
func (c *Client) ReadMemory(ref DeviceRef) (MemoryInfo, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.refs == 0 {
		return MemoryInfo{}, errNotInitialized("ReadMemory")
	}
	d, err := Lookup(c.lib, ref)
	if err != nil {
		return MemoryInfo{}, err
	}
	return d.MemoryInfo()
}

// defaultClient is the process-wide Client used by the package-level
// functions. It is created on first use so that merely linking this
// package costs nothing at start-up.
var defaultClient = sync.OnceValue(func() *Client { return NewClient(NewLibrary()) })

// Init initialises the process-wide NVML client (over [NewLibrary]); see
// [Client.Init]. Without an NVIDIA driver it returns an error wrapping
// ErrUnavailable, and the process carries on.
func Init() error { return defaultClient().Init() }

// Shutdown undoes one successful [Init]; see [Client.Shutdown].
func Shutdown() error { return defaultClient().Shutdown() }

// DeviceCount returns the number of GPUs of the process-wide client; see
// [Client.DeviceCount].
func DeviceCount() (int, error) { return defaultClient().DeviceCount() }

// DeviceFor returns the GPU that ref selects, from the process-wide client;
// see [Client.Device].
func DeviceFor(ref DeviceRef) (Device, error) { return defaultClient().Device(ref) }

// ReadMemory reads the memory of the GPU that ref selects, through the
// process-wide client; see [Client.ReadMemory].
func ReadMemory(ref DeviceRef) (MemoryInfo, error) { return defaultClient().ReadMemory(ref) }
