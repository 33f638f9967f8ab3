//go:build cgo

package nvml_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/adprouter/adprouter/nvml"
)

// mockGPU is a go-nvml mock device with both memory calls set.
func mockGPU(uuid string, v1 gonvml.Memory, v2 gonvml.Memory_v2) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:          func() (string, gonvml.Return) { return uuid, gonvml.SUCCESS },
		GetNameFunc:          func() (string, gonvml.Return) { return "Mock H100", gonvml.SUCCESS },
		GetMemoryInfoFunc:    func() (gonvml.Memory, gonvml.Return) { return v1, gonvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (gonvml.Memory_v2, gonvml.Return) { return v2, gonvml.SUCCESS },
	}
}

// mockLib is a go-nvml mock library over devs (PCI bus ids 00000000:0N:00.0,
// N = index+1) whose driver has the v2 memory call when hasV2 is true.
func mockLib(hasV2 bool, devs ...*mock.Device) *mock.Interface {
	ext := &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
		if s == "nvmlDeviceGetMemoryInfo_v2" && !hasV2 {
			return errors.New("symbol not found")
		}
		return nil
	}}
	byUUID := make(map[string]gonvml.Device) // fixed now: tests may break GetUUID later
	for _, d := range devs {
		u, _ := d.GetUUID()
		byUUID[u] = d
	}
	return &mock.Interface{
		InitFunc:           func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc:       func() gonvml.Return { return gonvml.SUCCESS },
		ExtensionsFunc:     func() gonvml.ExtendedInterface { return ext },
		DeviceGetCountFunc: func() (int, gonvml.Return) { return len(devs), gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (gonvml.Device, gonvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, gonvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], gonvml.SUCCESS
		},
		DeviceGetHandleByUUIDFunc: func(u string) (gonvml.Device, gonvml.Return) {
			if d, ok := byUUID[u]; ok {
				return d, gonvml.SUCCESS
			}
			return nil, gonvml.ERROR_NOT_FOUND
		},
		DeviceGetHandleByPciBusIdFunc: func(b string) (gonvml.Device, gonvml.Return) {
			for i, d := range devs {
				if strings.EqualFold(b, fmt.Sprintf("00000000:%02X:00.0", i+1)) {
					return d, gonvml.SUCCESS
				}
			}
			return nil, gonvml.ERROR_NOT_FOUND
		},
	}
}

var (
	memA   = gonvml.Memory{Total: 100, Free: 60, Used: 40}
	memA2  = gonvml.Memory_v2{Total: 100, Reserved: 10, Free: 60, Used: 30}
	memB   = gonvml.Memory{Total: 200, Free: 150, Used: 50}
	memB2  = gonvml.Memory_v2{Total: 200, Reserved: 5, Free: 150, Used: 45}
	wantA2 = nvml.MemoryInfo{TotalBytes: 100, FreeBytes: 60, UsedBytes: 30, ReservedBytes: 10, HasReserved: true}
	wantA1 = nvml.MemoryInfo{TotalBytes: 100, FreeBytes: 60, UsedBytes: 40}
	wantB2 = nvml.MemoryInfo{TotalBytes: 200, FreeBytes: 150, UsedBytes: 45, ReservedBytes: 5, HasReserved: true}
)

func TestGoNVMLLookup(t *testing.T) {
	lib := nvml.WrapGoNVML(mockLib(true, mockGPU("GPU-a", memA, memA2), mockGPU("GPU-b", memB, memB2)))
	require.NoError(t, lib.Init())
	n, err := lib.DeviceCount()
	require.NoError(t, err, "DeviceCount")
	require.Equal(t, 2, n, "DeviceCount")
	tests := []struct {
		ref  nvml.DeviceRef
		want nvml.MemoryInfo
	}{
		{nvml.ByUUID("GPU-a"), wantA2},
		{nvml.ByUUID("GPU-b"), wantB2},
		{nvml.ByIndex(1), wantB2},
		{nvml.ByPCIBusID("00000000:01:00.0"), wantA2},
	}
	for _, tt := range tests {
		d, err := nvml.Lookup(lib, tt.ref)
		if !assert.NoError(t, err, "Lookup(%v)", tt.ref) {
			continue
		}
		m, err := d.MemoryInfo()
		assert.NoError(t, err, "%v: MemoryInfo", tt.ref)
		assert.Equal(t, tt.want, m, "%v: MemoryInfo", tt.ref)
	}
	d, err := lib.DeviceByUUID("GPU-a")
	require.NoError(t, err)
	u, err := d.UUID()
	assert.NoError(t, err, "UUID")
	assert.Equal(t, "GPU-a", u, "UUID")
	name, err := d.Name()
	assert.NoError(t, err, "Name")
	assert.Equal(t, "Mock H100", name, "Name")
}

func TestGoNVMLFallbackToV1(t *testing.T) {
	t.Run("driver without v2", func(t *testing.T) {
		gpu := mockGPU("GPU-a", memA, memA2)
		gpu.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
			t.Error("v2 called although the driver lacks it")
			return gonvml.Memory_v2{}, gonvml.ERROR_FUNCTION_NOT_FOUND
		}
		lib := nvml.WrapGoNVML(mockLib(false, gpu))
		require.NoError(t, lib.Init())
		d, err := lib.DeviceByIndex(0)
		require.NoError(t, err)
		m, err := d.MemoryInfo()
		assert.NoError(t, err, "MemoryInfo")
		assert.Equal(t, wantA1, m, "MemoryInfo: want the v1 reading")
	})
	for _, ret := range []gonvml.Return{gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_FUNCTION_NOT_FOUND, gonvml.ERROR_ARGUMENT_VERSION_MISMATCH} {
		t.Run(ret.String(), func(t *testing.T) {
			gpu := mockGPU("GPU-a", memA, memA2)
			v2calls := 0
			gpu.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
				v2calls++
				return gonvml.Memory_v2{}, ret
			}
			lib := nvml.WrapGoNVML(mockLib(true, gpu))
			require.NoError(t, lib.Init())
			d, err := lib.DeviceByUUID("GPU-a")
			require.NoError(t, err)
			for i := 0; i < 3; i++ {
				m, err := d.MemoryInfo()
				assert.NoError(t, err, "read %d", i)
				assert.Equal(t, wantA1, m, "read %d: want the v1 reading", i)
			}
			assert.Equal(t, 1, v2calls, "v2 calls: want one, then v1 only")
		})
	}
}

// TestGoNVMLErrors maps every NVML failure that matters to our errors.
func TestGoNVMLErrors(t *testing.T) {
	tests := []struct {
		name    string
		ret     gonvml.Return
		op      string // which call fails
		want    error
		wantOp  string
		wantDev string
	}{
		{"library not found", gonvml.ERROR_LIBRARY_NOT_FOUND, "init", nvml.ErrUnavailable, "nvmlInit", ""},
		{"driver not loaded", gonvml.ERROR_DRIVER_NOT_LOADED, "init", nvml.ErrUnavailable, "nvmlInit", ""},
		{"function missing at init", gonvml.ERROR_FUNCTION_NOT_FOUND, "init", nvml.ErrUnavailable, "nvmlInit", ""},
		{"no permission at init", gonvml.ERROR_NO_PERMISSION, "init", nvml.ErrNoPermission, "nvmlInit", ""},
		{"count uninitialized", gonvml.ERROR_UNINITIALIZED, "count", nvml.ErrUnavailable, "nvmlDeviceGetCount", ""},
		{"uuid not found", gonvml.ERROR_NOT_FOUND, "uuid", nvml.ErrNotFound, "nvmlDeviceGetHandleByUUID", `uuid "GPU-a"`},
		{"uuid malformed", gonvml.ERROR_INVALID_ARGUMENT, "uuid", nvml.ErrInvalidArgument, "nvmlDeviceGetHandleByUUID", `uuid "GPU-a"`},
		{"index out of range", gonvml.ERROR_INVALID_ARGUMENT, "index", nvml.ErrNotFound, "nvmlDeviceGetHandleByIndex", "index 0"},
		{"index gpu lost", gonvml.ERROR_GPU_IS_LOST, "index", nvml.ErrGPULost, "nvmlDeviceGetHandleByIndex", "index 0"},
		{"pci not found", gonvml.ERROR_NOT_FOUND, "pci", nvml.ErrNotFound, "nvmlDeviceGetHandleByPciBusId", `pci bus id "00000000:01:00.0"`},
		{"memory gpu lost", gonvml.ERROR_GPU_IS_LOST, "memory", nvml.ErrGPULost, "nvmlDeviceGetMemoryInfo_v2", `uuid "GPU-a"`},
		{"memory reset required", gonvml.ERROR_RESET_REQUIRED, "memory", nvml.ErrGPULost, "nvmlDeviceGetMemoryInfo_v2", `uuid "GPU-a"`},
		{"memory no permission", gonvml.ERROR_NO_PERMISSION, "memory", nvml.ErrNoPermission, "nvmlDeviceGetMemoryInfo_v2", `uuid "GPU-a"`},
		{"memory unknown", gonvml.ERROR_UNKNOWN, "memory", nvml.ErrUnknown, "nvmlDeviceGetMemoryInfo_v2", `uuid "GPU-a"`},
		{"memory not supported in v1 either", gonvml.ERROR_NOT_SUPPORTED, "memory", nvml.ErrNotSupported, "nvmlDeviceGetMemoryInfo", `uuid "GPU-a"`},
		{"memory uninitialized", gonvml.ERROR_UNINITIALIZED, "memory", nvml.ErrUnavailable, "nvmlDeviceGetMemoryInfo_v2", `uuid "GPU-a"`},
		{"uuid query gpu lost", gonvml.ERROR_GPU_IS_LOST, "getuuid", nvml.ErrGPULost, "nvmlDeviceGetUUID", `uuid "GPU-a"`},
		{"name not supported", gonvml.ERROR_NOT_SUPPORTED, "name", nvml.ErrNotSupported, "nvmlDeviceGetName", `uuid "GPU-a"`},
		{"shutdown uninitialized", gonvml.ERROR_UNINITIALIZED, "shutdown", nvml.ErrUnavailable, "nvmlShutdown", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gpu := mockGPU("GPU-a", memA, memA2)
			m := mockLib(true, gpu)
			fail := func() gonvml.Return { return tt.ret }
			switch tt.op {
			case "init":
				m.InitFunc = fail
			case "count":
				m.DeviceGetCountFunc = func() (int, gonvml.Return) { return 0, tt.ret }
			case "uuid":
				m.DeviceGetHandleByUUIDFunc = func(string) (gonvml.Device, gonvml.Return) { return nil, tt.ret }
			case "index":
				m.DeviceGetHandleByIndexFunc = func(int) (gonvml.Device, gonvml.Return) { return nil, tt.ret }
			case "pci":
				m.DeviceGetHandleByPciBusIdFunc = func(string) (gonvml.Device, gonvml.Return) { return nil, tt.ret }
			case "memory":
				gpu.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{}, tt.ret }
				gpu.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) { return gonvml.Memory_v2{}, tt.ret }
			case "getuuid":
				gpu.GetUUIDFunc = func() (string, gonvml.Return) { return "", tt.ret }
			case "name":
				gpu.GetNameFunc = func() (string, gonvml.Return) { return "", tt.ret }
			case "shutdown":
				m.ShutdownFunc = fail
			}
			lib := nvml.WrapGoNVML(m)
			err := lib.Init()
			if tt.op != "init" {
				require.NoError(t, err)
				switch tt.op {
				case "count":
					_, err = lib.DeviceCount()
				case "uuid":
					_, err = lib.DeviceByUUID("GPU-a")
				case "index":
					_, err = lib.DeviceByIndex(0)
				case "pci":
					_, err = lib.DeviceByPCIBusID("00000000:01:00.0")
				case "shutdown":
					err = lib.Shutdown()
				default:
					d, lerr := lib.DeviceByUUID("GPU-a")
					require.NoError(t, lerr)
					switch tt.op {
					case "memory":
						_, err = d.MemoryInfo()
					case "getuuid":
						_, err = d.UUID()
					case "name":
						_, err = d.Name()
					}
				}
			}
			require.ErrorIs(t, err, tt.want)
			var e *nvml.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tt.wantOp, e.Op, "the failing NVML function")
			assert.Equal(t, tt.wantDev, e.Device, "the device")
			assert.Equal(t, int(tt.ret), e.Return, "NVML's code")
			assert.NotEmpty(t, e.Text, "NVML's text")
		})
	}
}

func TestGoNVMLRejectsBadRefs(t *testing.T) {
	// The arguments are checked before NVML is called: the mock has no
	// lookup funcs set and would panic if called.
	lib := nvml.WrapGoNVML(&mock.Interface{})
	for name, call := range map[string]func() (nvml.Device, error){
		"DeviceByIndex(-1)":    func() (nvml.Device, error) { return lib.DeviceByIndex(-1) },
		`DeviceByUUID("")`:     func() (nvml.Device, error) { return lib.DeviceByUUID("") },
		`DeviceByPCIBusID("")`: func() (nvml.Device, error) { return lib.DeviceByPCIBusID("") },
	} {
		_, err := call()
		assert.ErrorIs(t, err, nvml.ErrInvalidArgument, name)
	}
}
