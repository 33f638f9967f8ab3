// Package nvmltest holds the NVML fakes of the tests, so that code that
// reads GPU memory is tested without a GPU or a driver: [Library], an
// in-memory fake of [nvml.Library] (no cgo needed), whose devices' memory
// figures and errors can be changed while in use; and [BuildDriver], which
// builds a fake libnvidia-ml.so.1 from C ([DriverSource]) for tests of the
// real go-nvml path.
package nvmltest

import (
	"strconv"
	"strings"
	"sync"

	"github.com/adprouter/adprouter/nvml"
)

// Device is a fake GPU. Set the identity fields before use; change the
// memory and the error with SetMemory and SetError at any time.
type Device struct {
	ID       string // UUID, e.g. "GPU-0"
	Product  string // name, e.g. "Fake H100"
	PCIBusID string // e.g. "00000000:01:00.0"; "" matches no bus id

	lib   *Library // set by Library methods; calls fail while it is not initialised
	mu    sync.Mutex
	mem   nvml.MemoryInfo
	err   error
	reads int
}

// NewDevice returns a Device with the given UUID and memory reading.
func NewDevice(uuid string, mem nvml.MemoryInfo) *Device {
	return &Device{ID: uuid, Product: "Fake GPU", mem: mem}
}

// SetMemory sets what MemoryInfo returns from now on.
func (d *Device) SetMemory(m nvml.MemoryInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mem = m
}

// SetError makes every method fail with err from now on; nil heals it.
// Use an [*nvml.Error] or a sentinel error such as nvml.ErrGPULost.
func (d *Device) SetError(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

// Reads returns how many times MemoryInfo has been called.
func (d *Device) Reads() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reads
}

// snapshot returns the device's state, failing as NVML would when its
// library is not initialised or an error is set. It takes d.mu and then,
// with d.mu released, the library's lock, so lock order never inverts.
func (d *Device) snapshot(op string, read bool) (nvml.MemoryInfo, error) {
	d.mu.Lock()
	lib, mem, err := d.lib, d.mem, d.err
	if read {
		d.reads++
	}
	d.mu.Unlock()
	if lib != nil && !lib.Initialized() {
		return nvml.MemoryInfo{}, uninitialized(op, "uuid "+strconv.Quote(d.ID))
	}
	if err != nil {
		return nvml.MemoryInfo{}, err
	}
	return mem, nil
}

// MemoryInfo returns the memory set by SetMemory, or the error set by
// SetError.
func (d *Device) MemoryInfo() (nvml.MemoryInfo, error) {
	return d.snapshot("nvmlDeviceGetMemoryInfo_v2", true)
}

// UUID returns ID.
func (d *Device) UUID() (string, error) {
	if _, err := d.snapshot("nvmlDeviceGetUUID", false); err != nil {
		return "", err
	}
	return d.ID, nil
}

// Name returns Product.
func (d *Device) Name() (string, error) {
	if _, err := d.snapshot("nvmlDeviceGetName", false); err != nil {
		return "", err
	}
	return d.Product, nil
}

// Library is a fake NVML library holding Devices, which are indexed in
// order. It counts Init and Shutdown like NVML: calls other than Init fail
// with nvml.ErrUnavailable unless Init succeeded more often than Shutdown.
type Library struct {
	// Devices are the GPUs, NVML index i being Devices[i]. Set them
	// before the first Init.
	Devices []*Device
	// InitErr, when set, is what Init returns (use an error wrapping
	// nvml.ErrUnavailable to simulate a machine without a driver).
	InitErr error

	mu    sync.Mutex
	refs  int
	inits int // successful Init calls ever
}

var _ nvml.Library = (*Library)(nil)

// New returns a Library with the given devices.
func New(devices ...*Device) *Library { return &Library{Devices: devices} }

// Initialized reports whether Init succeeded more often than Shutdown.
func (l *Library) Initialized() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refs > 0
}

// Inits returns how many times Init has succeeded.
func (l *Library) Inits() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inits
}

func uninitialized(op, device string) error {
	return &nvml.Error{Op: op, Device: device, Return: 1, Text: "Uninitialized", Err: nvml.ErrUnavailable}
}

// Init returns InitErr, or counts one initialisation.
func (l *Library) Init() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.InitErr != nil {
		return l.InitErr
	}
	l.refs++
	l.inits++
	for _, d := range l.Devices {
		d.mu.Lock()
		d.lib = l
		d.mu.Unlock()
	}
	return nil
}

// Shutdown undoes one Init.
func (l *Library) Shutdown() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == 0 {
		return uninitialized("nvmlShutdown", "")
	}
	l.refs--
	return nil
}

func (l *Library) ready(op, device string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == 0 {
		return uninitialized(op, device)
	}
	return nil
}

// DeviceCount returns len(Devices).
func (l *Library) DeviceCount() (int, error) {
	if err := l.ready("nvmlDeviceGetCount", ""); err != nil {
		return 0, err
	}
	return len(l.Devices), nil
}

// DeviceByIndex returns Devices[index].
func (l *Library) DeviceByIndex(index int) (nvml.Device, error) {
	ref := nvml.ByIndex(index).String()
	if err := l.ready("nvmlDeviceGetHandleByIndex", ref); err != nil {
		return nil, err
	}
	if index < 0 || index >= len(l.Devices) {
		return nil, &nvml.Error{Op: "nvmlDeviceGetHandleByIndex", Device: ref, Return: 2, Text: "Invalid Argument", Err: nvml.ErrNotFound}
	}
	return l.Devices[index], nil
}

// DeviceByUUID returns the Device whose ID is uuid.
func (l *Library) DeviceByUUID(uuid string) (nvml.Device, error) {
	ref := nvml.ByUUID(uuid).String()
	if err := l.ready("nvmlDeviceGetHandleByUUID", ref); err != nil {
		return nil, err
	}
	for _, d := range l.Devices {
		if d.ID == uuid {
			return d, nil
		}
	}
	return nil, &nvml.Error{Op: "nvmlDeviceGetHandleByUUID", Device: ref, Return: 6, Text: "Not Found", Err: nvml.ErrNotFound}
}

// DeviceByPCIBusID returns the Device whose PCIBusID equals busID, ignoring
// case.
func (l *Library) DeviceByPCIBusID(busID string) (nvml.Device, error) {
	ref := nvml.ByPCIBusID(busID).String()
	if err := l.ready("nvmlDeviceGetHandleByPciBusId", ref); err != nil {
		return nil, err
	}
	for _, d := range l.Devices {
		if d.PCIBusID != "" && strings.EqualFold(d.PCIBusID, busID) {
			return d, nil
		}
	}
	return nil, &nvml.Error{Op: "nvmlDeviceGetHandleByPciBusId", Device: ref, Return: 6, Text: "Not Found", Err: nvml.ErrNotFound}
}
