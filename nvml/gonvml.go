//go:build cgo

package nvml

import (
	"strconv"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/atomic"
)

// NewLibrary returns the [Library] backed by the NVIDIA driver's
// libnvidia-ml.so.1, through go-nvml. Each call returns an instance with its
// own reference count (NVML itself is process-wide); [Init] and the other
// package-level functions share one.
func NewLibrary() Library { return WrapGoNVML(gonvml.New()) }

// WrapGoNVML returns a [Library] over any go-nvml implementation, such as
// gonvml.New() or a value from go-nvml's pkg/nvml/mock package. Besides the
// device calls it uses Extensions().LookupSymbol, once per Init, to learn
// whether the driver has nvmlDeviceGetMemoryInfo_v2 (mocks must set
// ExtensionsFunc).
func WrapGoNVML(lib gonvml.Interface) Library { return &goLibrary{lib: lib} }

type goLibrary struct {
	lib gonvml.Interface
	// hasV2 is whether the loaded driver exports the v2 memory call,
	// learnt at Init.
	hasV2 atomic.Bool
}

// nvmlError converts a failed go-nvml return into an *Error.
func nvmlError(op, device string, ret gonvml.Return, duringInit bool) *Error {
	return &Error{
		Op:     op,
		Device: device,
		Return: int(ret),
		Text:   ret.Error(),
		Err:    sentinelFor(int(ret), duringInit),
	}
}

func (l *goLibrary) Init() error {
	if ret := l.lib.Init(); ret != gonvml.SUCCESS {
		err := nvmlError("nvmlInit", "", ret, true)
		if ret == gonvml.ERROR_LIBRARY_NOT_FOUND {
			err.Text = "libnvidia-ml.so.1 not found or not loadable; is the NVIDIA driver installed?"
		}
		return err
	}
	// Ask before calling: on platforms without the forwarding stubs, calling
	// a function the driver lacks would kill the process.
	l.hasV2.Store(l.lib.Extensions().LookupSymbol("nvmlDeviceGetMemoryInfo_v2") == nil)
	return nil
}

func (l *goLibrary) Shutdown() error {
	if ret := l.lib.Shutdown(); ret != gonvml.SUCCESS {
		return nvmlError("nvmlShutdown", "", ret, false)
	}
	return nil
}

func (l *goLibrary) DeviceCount() (int, error) {
	n, ret := l.lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return 0, nvmlError("nvmlDeviceGetCount", "", ret, false)
	}
	return n, nil
}

func (l *goLibrary) DeviceByIndex(index int) (Device, error) {
	ref := ByIndex(index)
	if err := ref.Validate(); err != nil {
		return nil, err
	}
	d, ret := l.lib.DeviceGetHandleByIndex(index)
	if ret != gonvml.SUCCESS {
		err := nvmlError("nvmlDeviceGetHandleByIndex", ref.String(), ret, false)
		if ret == gonvml.ERROR_INVALID_ARGUMENT {
			// The index is the only argument and it is not negative:
			// NVML says INVALID_ARGUMENT for an index >= the device count.
			err.Err = ErrNotFound
		}
		return nil, err
	}
	return l.device(d, ref), nil
}

func (l *goLibrary) DeviceByUUID(uuid string) (Device, error) {
	ref := ByUUID(uuid)
	if err := ref.Validate(); err != nil {
		return nil, err
	}
	d, ret := l.lib.DeviceGetHandleByUUID(uuid)
	if ret != gonvml.SUCCESS {
		return nil, nvmlError("nvmlDeviceGetHandleByUUID", ref.String(), ret, false)
	}
	return l.device(d, ref), nil
}

func (l *goLibrary) DeviceByPCIBusID(busID string) (Device, error) {
	ref := ByPCIBusID(busID)
	if err := ref.Validate(); err != nil {
		return nil, err
	}
	d, ret := l.lib.DeviceGetHandleByPciBusId(busID)
	if ret != gonvml.SUCCESS {
		return nil, nvmlError("nvmlDeviceGetHandleByPciBusId", ref.String(), ret, false)
	}
	return l.device(d, ref), nil
}

func (l *goLibrary) device(d gonvml.Device, ref DeviceRef) *goDevice {
	g := &goDevice{dev: d, ref: ref.String()}
	g.noV2.Store(!l.hasV2.Load())
	return g
}

type goDevice struct {
	dev gonvml.Device
	ref string // for error messages
	// noV2 is set once the v2 memory call is known not to work for this
	// device, so later reads go straight to v1.
	noV2 atomic.Bool
}

func (d *goDevice) UUID() (string, error) {
	s, ret := d.dev.GetUUID()
	if ret != gonvml.SUCCESS {
		return "", nvmlError("nvmlDeviceGetUUID", d.ref, ret, false)
	}
	return s, nil
}

func (d *goDevice) Name() (string, error) {
	s, ret := d.dev.GetName()
	if ret != gonvml.SUCCESS {
		return "", nvmlError("nvmlDeviceGetName", d.ref, ret, false)
	}
	return s, nil
}

// MemoryInfo prefers nvmlDeviceGetMemoryInfo_v2, which reports the driver's
// reservation separately, and falls back to v1 when the driver lacks v2
// (FUNCTION_NOT_FOUND), the device does not support it (NOT_SUPPORTED) or the
// driver predates its struct version (ARGUMENT_VERSION_MISMATCH).
func (d *goDevice) MemoryInfo() (MemoryInfo, error) {
	if !d.noV2.Load() {
		m, ret := d.dev.GetMemoryInfo_v2()
		switch ret {
		case gonvml.SUCCESS:
			return MemoryInfo{
				TotalBytes:    m.Total,
				FreeBytes:     m.Free,
				UsedBytes:     m.Used,
				ReservedBytes: m.Reserved,
				HasReserved:   true,
			}, nil
		case gonvml.ERROR_FUNCTION_NOT_FOUND, gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_ARGUMENT_VERSION_MISMATCH:
			d.noV2.Store(true)
		default:
			return MemoryInfo{}, nvmlError("nvmlDeviceGetMemoryInfo_v2", d.ref, ret, false)
		}
	}
	m, ret := d.dev.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return MemoryInfo{}, nvmlError("nvmlDeviceGetMemoryInfo", d.ref, ret, false)
	}
	return MemoryInfo{TotalBytes: m.Total, FreeBytes: m.Free, UsedBytes: m.Used}, nil
}

// String identifies the device as it was looked up, for debugging.
func (d *goDevice) String() string { return "nvml device " + strconv.Quote(d.ref) }
