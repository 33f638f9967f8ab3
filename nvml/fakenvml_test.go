//go:build linux && cgo

package nvml

// Tests of the production path (package nvml -> go-nvml -> cgo -> forwarding
// stubs -> libnvidia-ml.so.1) against testdata/fakenvml/fake_nvml.c, built
// with gcc into a temporary directory. Each scenario runs in a child process
// of the test binary, with LD_LIBRARY_PATH pointing at the fake, because a
// process can load libnvidia-ml.so.1 only once.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/adprouter/adprouter/internal/fakenvml"
	"github.com/adprouter/adprouter/kvsize"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// helperEnv names the scenario a child process runs.
const helperEnv = "ADPR_NVML_TEST_SCENARIO"

// The fake's devices in most scenarios.
const (
	fakeDevices = "GPU-aaaa:85899345920:80530636800:536870912:Fake H100;" +
		"GPU-bbbb:150323855360:100000000000:1073741824:Fake H200"
	uuidA = "GPU-aaaa"
	uuidB = "GPU-bbbb"
)

var (
	memA = MemoryInfo{TotalBytes: 85899345920, FreeBytes: 80530636800, UsedBytes: 85899345920 - 80530636800 - 536870912, ReservedBytes: 536870912, HasReserved: true}
	memB = MemoryInfo{TotalBytes: 150323855360, FreeBytes: 100000000000, UsedBytes: 150323855360 - 100000000000 - 1073741824, ReservedBytes: 1073741824, HasReserved: true}
	// v1 readings: no reservation, which counts as used.
	memAv1 = MemoryInfo{TotalBytes: memA.TotalBytes, FreeBytes: memA.FreeBytes, UsedBytes: memA.TotalBytes - memA.FreeBytes}
)

// scenarios run in the child process, against whatever libnvidia-ml.so.1
// the parent put on LD_LIBRARY_PATH (if any).
var scenarios = map[string]func(t *testing.T){
	"lookup": func(t *testing.T) {
		lib := initLib(t)
		if n, err := lib.DeviceCount(); n != 2 || err != nil {
			t.Fatalf("DeviceCount() = %d, %v; want 2", n, err)
		}
		tests := []struct {
			ref  DeviceRef
			uuid string
			name string
			mem  MemoryInfo
		}{
			{ByUUID(uuidA), uuidA, "Fake H100", memA},
			{ByUUID(uuidB), uuidB, "Fake H200", memB},
			{ByIndex(0), uuidA, "Fake H100", memA},
			{ByIndex(1), uuidB, "Fake H200", memB},
			{ByPCIBusID("00000000:02:00.0"), uuidB, "Fake H200", memB},
			{ByPCIBusID("0000:01:00.0"), uuidA, "Fake H100", memA},
		}
		for _, tt := range tests {
			d, err := Lookup(lib, tt.ref)
			if err != nil {
				t.Errorf("Lookup(%v): %v", tt.ref, err)
				continue
			}
			u, uerr := d.UUID()
			n, nerr := d.Name()
			m, merr := d.MemoryInfo()
			if u != tt.uuid || n != tt.name || m != tt.mem || uerr != nil || nerr != nil || merr != nil {
				t.Errorf("%v: %q %q %+v (%v %v %v); want %q %q %+v", tt.ref, u, n, m, uerr, nerr, merr, tt.uuid, tt.name, tt.mem)
			}
		}
		for _, tt := range []struct {
			ref  DeviceRef
			want error
		}{
			{ByUUID("GPU-none"), ErrNotFound},
			{ByIndex(2), ErrNotFound},
			{ByPCIBusID("00000000:09:00.0"), ErrNotFound},
			{ByPCIBusID("not a bus id"), ErrInvalidArgument},
		} {
			if _, err := Lookup(lib, tt.ref); !errors.Is(err, tt.want) {
				t.Errorf("Lookup(%v): %v, want %v", tt.ref, err, tt.want)
			}
		}
	},

	"v2-absent": func(t *testing.T) {
		lib := initLib(t)
		d, err := lib.DeviceByUUID(uuidA)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := d.MemoryInfo(); m != memAv1 || err != nil {
			t.Errorf("MemoryInfo() = %+v, %v; want the v1 reading %+v", m, err, memAv1)
		}
		if !stubsBuilt {
			return
		}
		// Calling the missing function anyway, through go-nvml directly,
		// reaches the stub, which reports it missing instead of crashing.
		h, ret := gonvml.DeviceGetHandleByIndex(0) // go-nvml's package-level library
		if ret == gonvml.ERROR_UNINITIALIZED {
			if ret = gonvml.Init(); ret != gonvml.SUCCESS {
				t.Fatalf("gonvml.Init: %v", ret)
			}
			defer gonvml.Shutdown()
			h, ret = gonvml.DeviceGetHandleByIndex(0)
		}
		if ret != gonvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex: %v", ret)
		}
		if _, ret := h.GetMemoryInfo_v2(); ret != gonvml.ERROR_FUNCTION_NOT_FOUND {
			t.Errorf("GetMemoryInfo_v2 on a driver without it = %d, want ERROR_FUNCTION_NOT_FOUND (13)", int(ret))
		}
	},

	"v2-not-supported": func(t *testing.T) {
		lib := initLib(t)
		d, err := lib.DeviceByIndex(0)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if m, err := d.MemoryInfo(); m != memAv1 || err != nil {
				t.Errorf("read %d: MemoryInfo() = %+v, %v; want the v1 reading %+v", i, m, err, memAv1)
			}
		}
	},

	"gpu-lost": func(t *testing.T) {
		// FAKE_NVML_LOST_AFTER=3: the handle lookup and two reads succeed.
		lib := initLib(t)
		d, err := lib.DeviceByUUID(uuidB)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if _, err := d.MemoryInfo(); err != nil {
				t.Fatalf("read %d before the loss: %v", i, err)
			}
		}
		_, err = d.MemoryInfo()
		var e *Error
		if !errors.Is(err, ErrGPULost) || !errors.As(err, &e) || e.Return != 15 || e.Text != "GPU is lost" || e.Device != `uuid "GPU-bbbb"` {
			t.Fatalf("read after the loss: %v; want ErrGPULost with NVML code 15, its text and the device", err)
		}
		if _, err := lib.DeviceByIndex(0); !errors.Is(err, ErrGPULost) {
			t.Errorf("lookup after the loss: %v, want ErrGPULost", err)
		}
	},

	"init-error": func(t *testing.T) {
		err := NewLibrary().Init()
		var e *Error
		if !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) || e.Op != "nvmlInit" || e.Return == 0 {
			t.Fatalf("Init() = %v; want ErrUnavailable from nvmlInit with NVML's code", err)
		}
		t.Logf("Init: %v", err)
	},

	"no-permission": func(t *testing.T) {
		lib := initLib(t)
		d, err := lib.DeviceByIndex(0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.MemoryInfo(); !errors.Is(err, ErrNoPermission) {
			t.Errorf("MemoryInfo() error %v, want ErrNoPermission", err)
		}
	},

	"not-supported": func(t *testing.T) {
		lib := initLib(t)
		d, err := lib.DeviceByIndex(0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.MemoryInfo()
		var e *Error
		if !errors.Is(err, ErrNotSupported) || !errors.As(err, &e) || e.Op != "nvmlDeviceGetMemoryInfo" {
			t.Errorf("MemoryInfo() error %v; want ErrNotSupported from the v1 fallback", err)
		}
	},

	"shutdown-reinit": func(t *testing.T) {
		c := NewClient(NewLibrary())
		if err := c.Init(); err != nil {
			t.Fatal(err)
		}
		d, err := c.Device(ByUUID(uuidA))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Shutdown(); err != nil {
			t.Fatal(err)
		}
		if _, err := d.MemoryInfo(); !errors.Is(err, ErrUnavailable) {
			t.Errorf("read after Shutdown: %v, want ErrUnavailable", err)
		}
		if _, err := c.ReadMemory(ByUUID(uuidA)); !errors.Is(err, ErrUnavailable) {
			t.Errorf("ReadMemory after Shutdown: %v, want ErrUnavailable", err)
		}
		if err := c.Init(); err != nil {
			t.Fatalf("Init after Shutdown: %v", err)
		}
		defer c.Shutdown()
		if m, err := c.ReadMemory(ByUUID(uuidA)); m != memA || err != nil {
			t.Errorf("ReadMemory after re-Init = %+v, %v; want %+v", m, err, memA)
		}
	},

	"concurrent": func(t *testing.T) {
		// Many goroutines make the first calls of the memory and name
		// functions at once; the stubs resolve them concurrently.
		lib := initLib(t)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 64)
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 200; i++ {
					d, err := lib.DeviceByUUID(uuidB)
					if err != nil {
						errs <- err
						return
					}
					m, err := d.MemoryInfo()
					if err != nil || m != memB {
						errs <- fmt.Errorf("MemoryInfo() = %+v, %v", m, err)
						return
					}
					if n, err := d.Name(); n != "Fake H200" || err != nil {
						errs <- fmt.Errorf("Name() = %q, %v", n, err)
						return
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	},

	"package-level": func(t *testing.T) {
		if _, err := ReadMemory(ByUUID(uuidA)); !errors.Is(err, ErrUnavailable) {
			t.Errorf("ReadMemory before Init: %v, want ErrUnavailable", err)
		}
		if err := Init(); err != nil {
			t.Fatal(err)
		}
		if err := Init(); err != nil {
			t.Fatal(err)
		}
		if n, err := DeviceCount(); n != 2 || err != nil {
			t.Errorf("DeviceCount() = %d, %v", n, err)
		}
		if m, err := ReadMemory(ByPCIBusID("00000000:01:00.0")); m != memA || err != nil {
			t.Errorf("ReadMemory = %+v, %v; want %+v", m, err, memA)
		}
		d, err := DeviceFor(ByIndex(1))
		if err != nil {
			t.Fatal(err)
		}
		b, err := kvsize.SizeKV(kvsize.SizeInput{FreeBytes: mustMem(t, d).FreeBytes, ReserveBytes: 2 << 30, BytesPerToken: 131072})
		if err != nil || b.Tokens == 0 {
			t.Errorf("SizeKV from the fake's reading: %v, %v", b, err)
		}
		t.Log(b)
		for i := 0; i < 2; i++ {
			if err := Shutdown(); err != nil {
				t.Fatalf("Shutdown %d: %v", i, err)
			}
		}
		if err := Shutdown(); !errors.Is(err, ErrUnavailable) {
			t.Errorf("extra Shutdown: %v, want ErrUnavailable", err)
		}
	},

	"no-driver": func(t *testing.T) {
		err := NewLibrary().Init()
		if err == nil {
			t.Skip("a real libnvidia-ml.so.1 is installed on this machine")
		}
		var e *Error
		if !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) || e.Return != 12 {
			t.Fatalf("Init() = %v; want ErrUnavailable with NVML_ERROR_LIBRARY_NOT_FOUND (12)", err)
		}
		t.Logf("Init: %v", err)
	},

	"before-init": func(t *testing.T) {
		if !stubsBuilt {
			t.Skip("no forwarding stubs on this platform: a call before Init would kill the process")
		}
		// go-nvml's own library object, never initialised: the cgo call
		// reaches the stub, which finds no libnvidia-ml.so.1 loaded.
		if n, ret := gonvml.New().DeviceGetCount(); ret != gonvml.ERROR_UNINITIALIZED {
			t.Errorf("DeviceGetCount before Init = %d, %d; want ERROR_UNINITIALIZED (1)", n, int(ret))
		}
		if _, ret := gonvml.New().DeviceGetHandleByUUID(uuidA); ret != gonvml.ERROR_UNINITIALIZED {
			t.Errorf("DeviceGetHandleByUUID before Init = %d; want ERROR_UNINITIALIZED (1)", int(ret))
		}
	},
}

func mustMem(t *testing.T, d Device) MemoryInfo {
	t.Helper()
	m, err := d.MemoryInfo()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// initLib returns an initialised real Library, shut down at the end of t.
func initLib(t *testing.T) Library {
	t.Helper()
	lib := NewLibrary()
	if err := lib.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() {
		if err := lib.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return lib
}

// TestHelperProcess is the child side: it runs the scenario named by
// helperEnv, and nothing when run normally.
func TestHelperProcess(t *testing.T) {
	name := os.Getenv(helperEnv)
	if name == "" {
		t.Skip("runs only as a child process of TestFakeNVML and TestNoDriver")
	}
	run, ok := scenarios[name]
	if !ok {
		t.Fatalf("unknown scenario %q", name)
	}
	run(t)
}

// needGCC skips t under -short or without gcc.
func needGCC(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds C code with gcc and runs child processes; skipped with -short")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found on PATH: cannot build the fake libnvidia-ml.so.1")
	}
	return cc
}

// buildFake compiles the fake NVML into a new directory as
// libnvidia-ml.so.1 and returns the directory.
func buildFake(t *testing.T, cc string, cflags ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := fakenvml.Build(cc, dir, cflags...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runScenario runs a scenario in a child process with libDir as
// LD_LIBRARY_PATH, LD_BIND_NOW=1 (every symbol bound at load time, so an
// unresolved one would fail the start) and the extra environment.
func runScenario(t *testing.T, scenario, libDir string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "LD_LIBRARY_PATH" || k == "LD_BIND_NOW" || k == helperEnv || strings.HasPrefix(k, "FAKE_NVML_") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, helperEnv+"="+scenario, "LD_LIBRARY_PATH="+libDir, "LD_BIND_NOW=1")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	switch {
	case strings.Contains(string(out), "--- SKIP: TestHelperProcess"):
		t.Skipf("scenario %s skipped:\n%s", scenario, out)
	case err != nil || !strings.Contains(string(out), "--- PASS: TestHelperProcess"):
		t.Fatalf("scenario %s (env %q) failed: %v\n%s", scenario, env, err, out)
	}
	if testing.Verbose() {
		t.Logf("scenario %s:\n%s", scenario, out)
	}
}

// TestFakeNVML runs the real go-nvml path against the fake driver library.
func TestFakeNVML(t *testing.T) {
	cc := needGCC(t)
	fake := buildFake(t, cc)
	oldDriver := buildFake(t, cc, "-DFAKE_NVML_NO_V2")
	devs := "FAKE_NVML_DEVICES=" + fakeDevices

	tests := []struct {
		name     string
		scenario string
		lib      string
		env      []string
	}{
		{"lookup by UUID, index and PCI bus id", "lookup", fake, []string{devs}},
		{"v2 absent falls back to v1", "v2-absent", oldDriver, []string{devs}},
		{"v2 not supported falls back to v1", "v2-not-supported", fake, []string{devs, "FAKE_NVML_V2_ERROR=3"}},
		{"v2 reported missing falls back to v1", "v2-not-supported", fake, []string{devs, "FAKE_NVML_NO_V2=1"}},
		{"v2 struct version mismatch falls back to v1", "v2-not-supported", fake, []string{devs, "FAKE_NVML_V2_ERROR=25"}},
		{"GPU lost after 3 calls", "gpu-lost", fake, []string{devs, "FAKE_NVML_LOST_AFTER=3"}},
		{"init: driver not loaded", "init-error", fake, []string{"FAKE_NVML_INIT_ERROR=9"}},
		{"init: library/driver version mismatch", "init-error", fake, []string{"FAKE_NVML_INIT_ERROR=18"}},
		{"insufficient permissions", "no-permission", fake, []string{devs, "FAKE_NVML_NO_PERMISSION=1"}},
		{"memory query not supported", "not-supported", fake, []string{devs, "FAKE_NVML_MEMORY_ERROR=3"}},
		{"shutdown and re-init", "shutdown-reinit", fake, []string{devs}},
		{"concurrent first calls", "concurrent", fake, []string{devs}},
		{"package-level API", "package-level", fake, []string{devs}},
		{"call before Init with the fake present", "before-init", fake, []string{devs}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runScenario(t, tt.scenario, tt.lib, tt.env...)
		})
	}
}

// TestNoDriver checks, in a child process whose LD_LIBRARY_PATH holds no
// libnvidia-ml.so.1, that Init reports ErrUnavailable and that an NVML call
// made before Init returns an error instead of killing the process.
func TestNoDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes; skipped with -short")
	}
	empty := t.TempDir()
	t.Run("Init", func(t *testing.T) { runScenario(t, "no-driver", empty) })
	t.Run("call before Init", func(t *testing.T) { runScenario(t, "before-init", empty) })
}
