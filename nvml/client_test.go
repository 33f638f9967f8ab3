package nvml_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

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

	if err := c.Shutdown(); !errors.Is(err, nvml.ErrUnavailable) {
		t.Errorf("Shutdown before Init: %v, want ErrUnavailable", err)
	}
	for _, call := range []func() error{
		func() error { _, err := c.DeviceCount(); return err },
		func() error { _, err := c.Device(nvml.ByIndex(0)); return err },
		func() error { _, err := c.ReadMemory(nvml.ByIndex(0)); return err },
	} {
		if err := call(); !errors.Is(err, nvml.ErrUnavailable) || !strings.Contains(err.Error(), "call Init first") {
			t.Errorf("query before Init: %v, want ErrUnavailable saying to call Init first", err)
		}
	}

	for i := 0; i < 3; i++ {
		if err := c.Init(); err != nil {
			t.Fatalf("Init %d: %v", i, err)
		}
	}
	if lib.Inits() != 1 {
		t.Errorf("3 nested Inits initialised the library %d times, want 1", lib.Inits())
	}
	for i := 0; i < 2; i++ {
		if err := c.Shutdown(); err != nil {
			t.Fatalf("Shutdown %d: %v", i, err)
		}
		if !lib.Initialized() || !c.Initialized() {
			t.Fatalf("library shut down after %d of 3 Shutdowns", i+1)
		}
	}
	if err := c.Shutdown(); err != nil || lib.Initialized() || c.Initialized() {
		t.Fatalf("last Shutdown: %v; library initialised %v, client %v; want both false", err, lib.Initialized(), c.Initialized())
	}

	// A failed Init is not counted and can be retried.
	lib.InitErr = &nvml.Error{Op: "nvmlInit", Return: 12, Text: "not found", Err: nvml.ErrUnavailable}
	if err := c.Init(); !errors.Is(err, nvml.ErrUnavailable) {
		t.Fatalf("failing Init: %v", err)
	}
	if c.Initialized() {
		t.Fatal("failed Init counted")
	}
	lib.InitErr = nil
	if err := c.Init(); err != nil {
		t.Fatalf("retried Init: %v", err)
	}
}

func TestClientLookup(t *testing.T) {
	c := nvml.NewClient(twoGPUs())
	if err := c.Init(); err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()

	if n, err := c.DeviceCount(); n != 2 || err != nil {
		t.Errorf("DeviceCount() = %d, %v; want 2", n, err)
	}
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
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Device(%v): error %v, want %v", tt.ref, err, tt.wantErr)
			}
			if err != nil {
				if _, rerr := c.ReadMemory(tt.ref); !errors.Is(rerr, tt.wantErr) {
					t.Errorf("ReadMemory(%v): error %v, want %v", tt.ref, rerr, tt.wantErr)
				}
				return
			}
			if u, _ := d.UUID(); u != tt.wantUUID {
				t.Errorf("Device(%v) is %s, want %s", tt.ref, u, tt.wantUUID)
			}
			m, err := c.ReadMemory(tt.ref)
			want, _ := d.MemoryInfo()
			if err != nil || m != want {
				t.Errorf("ReadMemory(%v) = %+v, %v; want %+v", tt.ref, m, err, want)
			}
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
		if got := tt.ref.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.ref, got, tt.want)
		}
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
			if err != nil {
				t.Errorf("%v.Validate() = %v, want nil", tt.ref, err)
			}
			continue
		}
		if !errors.Is(err, nvml.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v.Validate() = %v; want ErrInvalidArgument mentioning %q", tt.ref, err, tt.want)
		}
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
