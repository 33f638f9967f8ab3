//go:build linux && cgo

package nvml_test

// Tests of the production path (package nvml -> go-nvml -> cgo -> forwarding
// stubs -> libnvidia-ml.so.1) against the fake driver library of package
// nvmltest (nvmltest/testdata/fake_nvml.c), built with gcc into a temporary
// directory. Each scenario runs in a child process of the test binary, with
// LD_LIBRARY_PATH pointing at the fake, because a process can load
// libnvidia-ml.so.1 only once.

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/adprouter/adprouter/kvsize"
	"github.com/adprouter/adprouter/nvml"
	"github.com/adprouter/adprouter/nvml/nvmltest"

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
	fakeMemA = nvml.MemoryInfo{TotalBytes: 85899345920, FreeBytes: 80530636800, UsedBytes: 85899345920 - 80530636800 - 536870912, ReservedBytes: 536870912, HasReserved: true}
	fakeMemB = nvml.MemoryInfo{TotalBytes: 150323855360, FreeBytes: 100000000000, UsedBytes: 150323855360 - 100000000000 - 1073741824, ReservedBytes: 1073741824, HasReserved: true}
	// v1 readings: no reservation, which counts as used.
	fakeMemAv1 = nvml.MemoryInfo{TotalBytes: fakeMemA.TotalBytes, FreeBytes: fakeMemA.FreeBytes, UsedBytes: fakeMemA.TotalBytes - fakeMemA.FreeBytes}
)

// requireNVMLError requires err to wrap sentinel and to be an *nvml.Error,
// which it returns for further checks.
func requireNVMLError(t *testing.T, err, sentinel error, msgAndArgs ...any) *nvml.Error {
	t.Helper()
	require.ErrorIs(t, err, sentinel, msgAndArgs...)
	var e *nvml.Error
	require.ErrorAs(t, err, &e, msgAndArgs...)
	return e
}

// scenarios run in the child process, against whatever libnvidia-ml.so.1
// the parent put on LD_LIBRARY_PATH (if any).
var scenarios = map[string]func(t *testing.T){
	"lookup": func(t *testing.T) {
		lib := initLib(t)
		n, err := lib.DeviceCount()
		require.NoError(t, err, "DeviceCount")
		require.Equal(t, 2, n, "DeviceCount")
		tests := []struct {
			ref  nvml.DeviceRef
			uuid string
			name string
			mem  nvml.MemoryInfo
		}{
			{nvml.ByUUID(uuidA), uuidA, "Fake H100", fakeMemA},
			{nvml.ByUUID(uuidB), uuidB, "Fake H200", fakeMemB},
			{nvml.ByIndex(0), uuidA, "Fake H100", fakeMemA},
			{nvml.ByIndex(1), uuidB, "Fake H200", fakeMemB},
			{nvml.ByPCIBusID("00000000:02:00.0"), uuidB, "Fake H200", fakeMemB},
			{nvml.ByPCIBusID("0000:01:00.0"), uuidA, "Fake H100", fakeMemA},
		}
		for _, tt := range tests {
			d, err := nvml.Lookup(lib, tt.ref)
			if !assert.NoError(t, err, "Lookup(%v)", tt.ref) {
				continue
			}
			u, err := d.UUID()
			assert.NoError(t, err, "%v: UUID", tt.ref)
			assert.Equal(t, tt.uuid, u, "%v: UUID", tt.ref)
			n, err := d.Name()
			assert.NoError(t, err, "%v: Name", tt.ref)
			assert.Equal(t, tt.name, n, "%v: Name", tt.ref)
			m, err := d.MemoryInfo()
			assert.NoError(t, err, "%v: MemoryInfo", tt.ref)
			assert.Equal(t, tt.mem, m, "%v: MemoryInfo", tt.ref)
		}
		for _, tt := range []struct {
			ref  nvml.DeviceRef
			want error
		}{
			{nvml.ByUUID("GPU-none"), nvml.ErrNotFound},
			{nvml.ByIndex(2), nvml.ErrNotFound},
			{nvml.ByPCIBusID("00000000:09:00.0"), nvml.ErrNotFound},
			{nvml.ByPCIBusID("not a bus id"), nvml.ErrInvalidArgument},
		} {
			_, err := nvml.Lookup(lib, tt.ref)
			assert.ErrorIs(t, err, tt.want, "Lookup(%v)", tt.ref)
		}
	},

	"v2-absent": func(t *testing.T) {
		lib := initLib(t)
		d, err := lib.DeviceByUUID(uuidA)
		require.NoError(t, err)
		m, err := d.MemoryInfo()
		assert.NoError(t, err, "MemoryInfo")
		assert.Equal(t, fakeMemAv1, m, "MemoryInfo: want the v1 reading")
		if !nvml.StubsBuilt {
			return
		}
		// Calling the missing function anyway, through go-nvml directly,
		// reaches the stub, which reports it missing instead of crashing.
		h, ret := gonvml.DeviceGetHandleByIndex(0) // go-nvml's package-level library
		if ret == gonvml.ERROR_UNINITIALIZED {
			require.Equal(t, gonvml.SUCCESS, gonvml.Init(), "gonvml.Init")
			defer gonvml.Shutdown()
			h, ret = gonvml.DeviceGetHandleByIndex(0)
		}
		require.Equal(t, gonvml.SUCCESS, ret, "DeviceGetHandleByIndex")
		_, ret = h.GetMemoryInfo_v2()
		assert.Equal(t, gonvml.ERROR_FUNCTION_NOT_FOUND, ret, "GetMemoryInfo_v2 on a driver without it")
	},

	"v2-not-supported": func(t *testing.T) {
		lib := initLib(t)
		d, err := lib.DeviceByIndex(0)
		require.NoError(t, err)
		for i := 0; i < 2; i++ {
			m, err := d.MemoryInfo()
			assert.NoError(t, err, "read %d", i)
			assert.Equal(t, fakeMemAv1, m, "read %d: want the v1 reading", i)
		}
	},

	"gpu-lost": func(t *testing.T) {
		// FAKE_NVML_LOST_AFTER=3: the handle lookup and two reads succeed.
		lib := initLib(t)
		d, err := lib.DeviceByUUID(uuidB)
		require.NoError(t, err)
		for i := 0; i < 2; i++ {
			_, err := d.MemoryInfo()
			require.NoError(t, err, "read %d before the loss", i)
		}
		_, err = d.MemoryInfo()
		e := requireNVMLError(t, err, nvml.ErrGPULost, "read after the loss")
		assert.Equal(t, 15, e.Return, "NVML code of the read after the loss")
		assert.Equal(t, "GPU is lost", e.Text, "NVML text of the read after the loss")
		assert.Equal(t, `uuid "GPU-bbbb"`, e.Device, "device of the read after the loss")
		_, err = lib.DeviceByIndex(0)
		assert.ErrorIs(t, err, nvml.ErrGPULost, "lookup after the loss")
	},

	"init-error": func(t *testing.T) {
		err := nvml.NewLibrary().Init()
		e := requireNVMLError(t, err, nvml.ErrUnavailable, "Init")
		assert.Equal(t, "nvmlInit", e.Op, "Init's failing call")
		assert.NotZero(t, e.Return, "Init: want NVML's code")
		t.Logf("Init: %v", err)
	},

	"no-permission": func(t *testing.T) {
		lib := initLib(t)
		d, err := lib.DeviceByIndex(0)
		require.NoError(t, err)
		_, err = d.MemoryInfo()
		assert.ErrorIs(t, err, nvml.ErrNoPermission, "MemoryInfo")
	},

	"not-supported": func(t *testing.T) {
		lib := initLib(t)
		d, err := lib.DeviceByIndex(0)
		require.NoError(t, err)
		_, err = d.MemoryInfo()
		e := requireNVMLError(t, err, nvml.ErrNotSupported, "MemoryInfo")
		assert.Equal(t, "nvmlDeviceGetMemoryInfo", e.Op, "MemoryInfo: want the error of the v1 fallback")
	},

	"shutdown-reinit": func(t *testing.T) {
		c := nvml.NewClient(nvml.NewLibrary())
		require.NoError(t, c.Init())
		d, err := c.Device(nvml.ByUUID(uuidA))
		require.NoError(t, err)
		require.NoError(t, c.Shutdown())
		_, err = d.MemoryInfo()
		assert.ErrorIs(t, err, nvml.ErrUnavailable, "read after Shutdown")
		_, err = c.ReadMemory(nvml.ByUUID(uuidA))
		assert.ErrorIs(t, err, nvml.ErrUnavailable, "ReadMemory after Shutdown")
		require.NoError(t, c.Init(), "Init after Shutdown")
		defer c.Shutdown()
		m, err := c.ReadMemory(nvml.ByUUID(uuidA))
		assert.NoError(t, err, "ReadMemory after re-Init")
		assert.Equal(t, fakeMemA, m, "ReadMemory after re-Init")
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
					if err != nil || m != fakeMemB {
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
		_, err := nvml.ReadMemory(nvml.ByUUID(uuidA))
		assert.ErrorIs(t, err, nvml.ErrUnavailable, "ReadMemory before Init")
		require.NoError(t, nvml.Init())
		require.NoError(t, nvml.Init())
		n, err := nvml.DeviceCount()
		assert.NoError(t, err, "DeviceCount")
		assert.Equal(t, 2, n, "DeviceCount")
		m, err := nvml.ReadMemory(nvml.ByPCIBusID("00000000:01:00.0"))
		assert.NoError(t, err, "ReadMemory")
		assert.Equal(t, fakeMemA, m, "ReadMemory")
		d, err := nvml.DeviceFor(nvml.ByIndex(1))
		require.NoError(t, err)
		m, err = d.MemoryInfo()
		require.NoError(t, err)
		b, err := kvsize.SizeKV(kvsize.SizeInput{FreeBytes: m.FreeBytes, ReserveBytes: 2 << 30, BytesPerToken: 131072})
		assert.NoError(t, err, "SizeKV from the fake's reading")
		assert.NotZero(t, b.Tokens, "SizeKV from the fake's reading: %v", b)
		t.Log(b)
		for i := 0; i < 2; i++ {
			require.NoError(t, nvml.Shutdown(), "Shutdown %d", i)
		}
		assert.ErrorIs(t, nvml.Shutdown(), nvml.ErrUnavailable, "extra Shutdown")
	},

	"no-driver": func(t *testing.T) {
		err := nvml.NewLibrary().Init()
		if err == nil {
			t.Skip("a real libnvidia-ml.so.1 is installed on this machine")
		}
		e := requireNVMLError(t, err, nvml.ErrUnavailable, "Init")
		require.Equal(t, 12, e.Return, "Init: want NVML_ERROR_LIBRARY_NOT_FOUND")
		t.Logf("Init: %v", err)
	},

	"before-init": func(t *testing.T) {
		if !nvml.StubsBuilt {
			t.Skip("no forwarding stubs on this platform: a call before Init would kill the process")
		}
		// go-nvml's own library object, never initialised: the cgo call
		// reaches the stub, which finds no libnvidia-ml.so.1 loaded.
		n, ret := gonvml.New().DeviceGetCount()
		assert.Equal(t, gonvml.ERROR_UNINITIALIZED, ret, "DeviceGetCount before Init (count %d)", n)
		_, ret = gonvml.New().DeviceGetHandleByUUID(uuidA)
		assert.Equal(t, gonvml.ERROR_UNINITIALIZED, ret, "DeviceGetHandleByUUID before Init")
	},
}

// initLib returns an initialised real Library, shut down at the end of t.
func initLib(t *testing.T) nvml.Library {
	t.Helper()
	lib := nvml.NewLibrary()
	require.NoError(t, lib.Init(), "Init")
	t.Cleanup(func() { assert.NoError(t, lib.Shutdown(), "Shutdown") })
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
	require.True(t, ok, "unknown scenario %q", name)
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
	require.NoError(t, nvmltest.BuildDriver(cc, dir, cflags...))
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
