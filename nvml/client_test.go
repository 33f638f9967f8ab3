package nvml_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/adprouter/adprouter/nvml"
	"github.com/adprouter/adprouter/nvml/nvmltest"
)

func twoGPUs() *nvmltest.Library {
	a := nvmltest.NewDevice("GPU-a", nvml.MemoryInfo{TotalBytes: 100, FreeBytes: 60, UsedBytes: 30, ReservedBytes: 10, HasReserved: true})
	a.PCIBusID = "00000000:3B:00.0"
	b := nvmltest.NewDevice("GPU-b", nvml.MemoryInfo{TotalBytes: 200, FreeBytes: 150, UsedBytes: 50})
	b.PCIBusID = "00000000:86:00.0"
	return nvmltest.New(a, b)
}

func TestClientRefcount(t *testing.T) {
	lib := twoGPUs()
	c := nvml.NewClient(lib)

	assert.ErrorIs(t, c.Shutdown(), nvml.ErrUnavailable, "Shutdown before Init")
	for name, call := range map[string]func() error{
		"DeviceCount": func() error { _, err := c.DeviceCount(); return err },
		"Device":      func() error { _, err := c.Device(nvml.ByIndex(0)); return err },
		"ReadMemory":  func() error { _, err := c.ReadMemory(nvml.ByIndex(0)); return err },
	} {
		err := call()
		assert.ErrorIs(t, err, nvml.ErrUnavailable, "%s before Init", name)
		assert.ErrorContains(t, err, "call Init first", "%s before Init", name)
	}

	for i := 0; i < 3; i++ {
		require.NoError(t, c.Init(), "Init %d", i)
	}
	assert.Equal(t, 1, lib.Inits(), "library initialisations after 3 nested Inits")
	for i := 0; i < 2; i++ {
		require.NoError(t, c.Shutdown(), "Shutdown %d", i)
		require.True(t, lib.Initialized() && c.Initialized(), "library shut down after %d of 3 Shutdowns", i+1)
	}
	require.NoError(t, c.Shutdown(), "last Shutdown")
	require.False(t, lib.Initialized(), "library initialised after the last Shutdown")
	require.False(t, c.Initialized(), "client initialised after the last Shutdown")

	// A failed Init is not counted and can be retried.
	lib.InitErr = &nvml.Error{Op: "nvmlInit", Return: 12, Text: "not found", Err: nvml.ErrUnavailable}
	require.ErrorIs(t, c.Init(), nvml.ErrUnavailable, "failing Init")
	require.False(t, c.Initialized(), "failed Init counted")
	lib.InitErr = nil
	require.NoError(t, c.Init(), "retried Init")
}

func TestClientLookup(t *testing.T) {
	c := nvml.NewClient(twoGPUs())
	require.NoError(t, c.Init())
	defer c.Shutdown()

	n, err := c.DeviceCount()
	assert.NoError(t, err, "DeviceCount")
	assert.Equal(t, 2, n, "DeviceCount")
	tests := []struct {
		ref      nvml.DeviceRef
		wantUUID string
		wantErr  error
	}{
		{nvml.ByUUID("GPU-b"), "GPU-b", nil},
		{nvml.ByIndex(0), "GPU-a", nil},
		{nvml.ByIndex(1), "GPU-b", nil},
		{nvml.ByPCIBusID("00000000:86:00.0"), "GPU-b", nil},
		{nvml.ByPCIBusID("00000000:3b:00.0"), "GPU-a", nil},
		{nvml.ByUUID("GPU-x"), "", nvml.ErrNotFound},
		{nvml.ByIndex(2), "", nvml.ErrNotFound},
		{nvml.ByPCIBusID("00000000:01:00.0"), "", nvml.ErrNotFound},
		{nvml.ByIndex(-1), "", nvml.ErrInvalidArgument},
		{nvml.ByUUID(""), "", nvml.ErrInvalidArgument},
		{nvml.DeviceRef{}, "", nvml.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.ref.String(), func(t *testing.T) {
			d, err := c.Device(tt.ref)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr, "Device(%v)", tt.ref)
				_, err = c.ReadMemory(tt.ref)
				assert.ErrorIs(t, err, tt.wantErr, "ReadMemory(%v)", tt.ref)
				return
			}
			require.NoError(t, err, "Device(%v)", tt.ref)
			u, _ := d.UUID()
			assert.Equal(t, tt.wantUUID, u, "UUID of Device(%v)", tt.ref)
			m, err := c.ReadMemory(tt.ref)
			want, _ := d.MemoryInfo()
			assert.NoError(t, err, "ReadMemory(%v)", tt.ref)
			assert.Equal(t, want, m, "ReadMemory(%v)", tt.ref)
		})
	}
}

func TestDeviceRefString(t *testing.T) {
	tests := []struct {
		ref  nvml.DeviceRef
		want string
	}{
		{nvml.ByUUID("GPU-1"), `uuid "GPU-1"`},
		{nvml.ByPCIBusID("00000000:3B:00.0"), `pci bus id "00000000:3B:00.0"`},
		{nvml.ByIndex(3), "index 3"},
		{nvml.DeviceRef{}, "DeviceRef{Kind: 0}"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.ref.String(), "%#v.String()", tt.ref)
	}
}

func TestDeviceRefValidate(t *testing.T) {
	tests := []struct {
		ref  nvml.DeviceRef
		want string // "" for valid
	}{
		{nvml.ByUUID("GPU-1"), ""},
		{nvml.ByPCIBusID("0000:3b:00.0"), ""},
		{nvml.ByIndex(0), ""},
		{nvml.ByUUID(""), "empty ID"},
		{nvml.ByPCIBusID(""), "by PCI bus id has an empty ID"},
		{nvml.ByIndex(-1), "index -1 is negative"},
		{nvml.DeviceRef{Kind: 9}, "kind 9 is not one of"},
	}
	for _, tt := range tests {
		err := tt.ref.Validate()
		if tt.want == "" {
			assert.NoError(t, err, "%v.Validate()", tt.ref)
			continue
		}
		assert.ErrorIs(t, err, nvml.ErrInvalidArgument, "%v.Validate()", tt.ref)
		assert.ErrorContains(t, err, tt.want, "%v.Validate()", tt.ref)
	}
}

func ExampleClient() {
	// nvmltest stands in for nvml.NewLibrary() so that the example runs
	// without a GPU.
	gpu := nvmltest.NewDevice("GPU-8b8c", nvml.MemoryInfo{TotalBytes: 80 << 30, FreeBytes: 70 << 30, UsedBytes: 9 << 30, ReservedBytes: 1 << 30, HasReserved: true})
	c := nvml.NewClient(nvmltest.New(gpu))
	if err := c.Init(); err != nil {
		// errors.Is(err, nvml.ErrUnavailable) on machines without a driver.
		fmt.Println(err)
		return
	}
	defer c.Shutdown()
	m, err := c.ReadMemory(nvml.ByUUID("GPU-8b8c"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.FreeBytes>>30, "GiB free of", m.TotalBytes>>30)
	// Output: 70 GiB free of 80
}
