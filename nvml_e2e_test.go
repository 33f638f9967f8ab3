// End-to-end tests of the shipped library's NVML side: it has no undefined
// nvml* symbols, and examples/cpp/nvml_budget.cpp, loading it with
// dlopen(RTLD_NOW), reads GPU memory and sizes KV budgets through the real
// go-nvml code path, against no driver at all and against a fake
// libnvidia-ml.so.1 built by nvmltest.BuildDriver (found through
// LD_LIBRARY_PATH). The expected figures come from package nvml.
package adprouter_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/adprouter/adprouter/kvsize"
	"github.com/adprouter/adprouter/nvml"
	"github.com/adprouter/adprouter/nvml/nvmltest"
)

// The library resolves NVML's symbols itself (dlopen/dlsym), so loading it
// never needs a driver: no nvml* symbol may be left for the loader, and
// libnvidia-ml must not be a DT_NEEDED dependency.
func TestNoUndefinedNVMLSymbols(t *testing.T) {
	lib := library(t)
	undefined := dynamicSymbols(t, lib, "--undefined-only")
	var bad []string
	for _, name := range undefined {
		if strings.HasPrefix(strings.ToLower(name), "nvml") {
			bad = append(bad, name)
		}
	}
	if len(bad) > 0 {
		t.Errorf("nm -D --undefined-only %s lists %d nvml symbols, want none:\n%s", lib, len(bad), strings.Join(bad, "\n"))
	}
	if !slices.Contains(undefined, "dlopen") {
		t.Errorf("nm -D --undefined-only lists no dlopen; is this the library?\n%s", strings.Join(undefined, "\n"))
	}
	need(t, "readelf")
	if d := run(t, nil, "readelf", "-d", lib); strings.Contains(d, "libnvidia-ml") {
		t.Errorf("readelf -d shows a dependency on libnvidia-ml:\n%s", d)
	}
}

// Exit statuses of examples/cpp/nvml_budget.cpp.
const (
	budgetOK          = 0
	budgetUnavailable = 3
	budgetGPUError    = 4
)

// cleanEnv is the test's environment without anything that points the
// loader or the fake NVML somewhere, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "LD_LIBRARY_PATH" || k == "LD_BIND_NOW" || k == "LD_PRELOAD" || strings.HasPrefix(k, "FAKE_NVML_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// runExit runs a command with exactly env and returns its combined output
// and exit status; a command killed by a signal fails the test.
func runExit(t *testing.T, env []string, name string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return out.String(), exit.ExitCode()
	}
	t.Fatalf("%s %s (env %v): %v (a crash?)\n%s", name, strings.Join(args, " "), extra(env), err, out.String())
	return "", -1
}

// extra returns the entries of env that matter here, for messages.
func extra(env []string) []string {
	var e []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "LD_") || strings.HasPrefix(kv, "FAKE_NVML_") {
			e = append(e, kv)
		}
	}
	return e
}

// budgetCSV returns the --csv line of nvml_budget's output as a map.
func budgetCSV(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "device,total_bytes,") && i+1 < len(lines) {
			keys, vals := strings.Split(l, ","), strings.Split(lines[i+1], ",")
			if len(keys) != len(vals) {
				t.Fatalf("csv header has %d fields, line %d:\n%s", len(keys), len(vals), out)
			}
			m := make(map[string]string, len(keys))
			for k := range keys {
				m[keys[k]] = vals[k]
			}
			return m
		}
	}
	t.Fatalf("no csv line in the output:\n%s", out)
	return nil
}

type fakeGPU struct {
	uuid                  string
	total, free, reserved uint64
}

const gib = uint64(1) << 30

// The fake GPUs: index i has PCI bus id 00000000:(i+1):00.0.
var fakeGPUs = []fakeGPU{
	{"GPU-aaaaaaaa-fake-4000-8000-000000000000", 80 * gib, 60*gib + 12345, gib / 2},
	{"GPU-bbbbbbbb-fake-4000-8000-000000000001", 141 * gib, 20 * gib, 3 * gib / 4},
}

func fakeDevicesEnv() string {
	var s []string
	for _, d := range fakeGPUs {
		s = append(s, fmt.Sprintf("%s:%d:%d:%d:Fake GPU", d.uuid, d.total, d.free, d.reserved))
	}
	return "FAKE_NVML_DEVICES=" + strings.Join(s, ";")
}

var budgetModels = map[string]kvsize.KVShape{
	"llama-3.1-8b":  {Attention: kvsize.AttentionGQA, DType: kvsize.DTypeBF16, Layers: 32, KVHeads: 8, HeadDim: 128},
	"llama-3.1-70b": {Attention: kvsize.AttentionGQA, DType: kvsize.DTypeBF16, Layers: 80, KVHeads: 8, HeadDim: 128},
	"deepseek-v3":   {Attention: kvsize.AttentionMLA, DType: kvsize.DTypeBF16, Layers: 61, KVLoraRank: 512, QKRopeHeadDim: 64},
}

func TestNVMLBudgetCpp(t *testing.T) {
	lib := library(t)
	cxx := need(t, "g++")
	cc := need(t, "gcc")
	dir := t.TempDir()
	bin := filepath.Join(dir, "nvml_budget")
	run(t, nil, cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-Iinclude", "-o", bin,
		"examples/cpp/nvml_budget.cpp", "-ldl")
	binds := [][]string{nil, {"LD_BIND_NOW=1"}}

	// No driver: the documented status and message, no crash.
	for _, bind := range binds {
		out, code := runExit(t, cleanEnv(bind...), bin, lib)
		if code == budgetOK {
			t.Logf("an NVIDIA driver is installed (env %v); skipping the no-driver check:\n%s", bind, out)
			continue
		}
		if code != budgetUnavailable || !strings.Contains(out, "NVML unavailable") || !strings.Contains(out, "status 5") {
			t.Errorf("without a driver (env %v): exit %d, want %d with an NVML-unavailable message:\n%s",
				bind, code, budgetUnavailable, out)
		}
	}

	// The fake, with and without nvmlDeviceGetMemoryInfo_v2.
	fakes := map[string]string{}
	for _, variant := range []string{"v2", "nov2"} {
		d := filepath.Join(dir, variant)
		require.NoError(t, os.Mkdir(d, 0o755))
		var flags []string
		if variant == "nov2" {
			flags = []string{"-DFAKE_NVML_NO_V2"}
		}
		require.NoError(t, nvmltest.BuildDriver(cc, d, flags...), "building the fake NVML (%s)", variant)
		fakes[variant] = d
	}

	type tc struct {
		name    string
		variant string
		index   int // the fake GPU
		args    []string
		model   string
		reserve uint64
		frac    float64
		guard   uint64
	}
	cases := []tc{
		{name: "defaults", variant: "v2", index: 0, model: "llama-3.1-8b", frac: 0.9, guard: gib},
		{name: "uuid 70b pressure", variant: "v2", index: 1, model: "llama-3.1-70b", reserve: 2 * gib, frac: 0.85, guard: 24 * gib,
			args: []string{"--device", fakeGPUs[1].uuid, "--model", "llama-3.1-70b", "--reserve-gib", "2", "--fraction", "0.85", "--guard-gib", "24"}},
		{name: "pci deepseek", variant: "v2", index: 1, model: "deepseek-v3", frac: 1, guard: 0,
			args: []string{"--device", "pci:00000000:02:00.0", "--model", "deepseek-v3", "--fraction", "1", "--guard-gib", "0"}},
		{name: "reserve above free", variant: "v2", index: 0, model: "llama-3.1-8b", reserve: 100 * gib, frac: 0.9, guard: gib,
			args: []string{"--device", "uuid:" + fakeGPUs[0].uuid, "--reserve-gib", "100"}},
		{name: "v1 driver", variant: "nov2", index: 1, model: "llama-3.1-8b", frac: 0.9, guard: 21 * gib,
			args: []string{"--device", "index:1", "--guard-gib", "21"}},
	}
	for _, c := range cases {
		for _, bind := range binds {
			t.Run(fmt.Sprintf("%s %v", c.name, bind), func(t *testing.T) {
				env := cleanEnv(append([]string{"LD_LIBRARY_PATH=" + fakes[c.variant], fakeDevicesEnv()}, bind...)...)
				out, code := runExit(t, env, bin, append(append([]string{lib}, c.args...), "--csv")...)
				require.Equal(t, budgetOK, code, "exit status; output:\n%s", out)
				got := budgetCSV(t, out)
				d := fakeGPUs[c.index]
				hasV2 := c.variant == "v2"
				mem := nvml.MemoryInfo{TotalBytes: d.total, FreeBytes: d.free, UsedBytes: d.total - d.free}
				if hasV2 {
					mem.UsedBytes, mem.ReservedBytes, mem.HasReserved = d.total-d.free-d.reserved, d.reserved, true
				}
				bpt, err := budgetModels[c.model].BytesPerToken()
				require.NoError(t, err)
				b, err := kvsize.SizeKV(kvsize.SizeInput{FreeBytes: d.free, ReserveBytes: c.reserve, Fraction: c.frac, BytesPerToken: bpt})
				require.NoError(t, err)
				capacity := b.Tokens
				free := b.Blocks / 2 * b.TokensPerBlock
				adm, err := kvsize.Guard(kvsize.GuardInput{CapacityTokens: capacity, FreeTokens: free, DeviceFreeBytes: d.free,
					GuardBandBytes: c.guard, BytesPerToken: bpt})
				require.NoError(t, err)
				want := map[string]uint64{
					"total_bytes": mem.TotalBytes, "free_bytes": mem.FreeBytes, "used_bytes": mem.UsedBytes,
					"reserved_bytes": mem.ReservedBytes, "has_reserved": b2u(mem.HasReserved),
					"bytes_per_token": bpt, "reserve_bytes": c.reserve, "available_bytes": b.AvailableBytes,
					"usable_bytes": b.UsableBytes, "fit_tokens": b.FitTokens, "kv_tokens": b.Tokens,
					"kv_blocks": b.Blocks, "capped": b2u(b.Capped), "guard_band_bytes": c.guard,
					"engine_capacity_tokens": capacity, "engine_free_tokens": free,
					"kv_capacity_tokens": adm.CapacityTokens, "free_kv_tokens": adm.FreeTokens,
					"memory_pressure": b2u(adm.MemoryPressure),
				}
				for k, w := range want {
					g, err := strconv.ParseUint(got[k], 10, 64)
					assert.NoError(t, err, "csv field %s = %q", k, got[k])
					assert.Equal(t, w, g, "csv field %s", k)
				}
				f, err := strconv.ParseFloat(got["fraction"], 64)
				assert.NoError(t, err, "csv field fraction = %q", got["fraction"])
				assert.Equal(t, b.Fraction, f, "csv field fraction")
				assert.Equal(t, c.model, got["model"], "csv field model")
				// The human-readable figures are the same numbers.
				for _, s := range []string{fmt.Sprintf("devices: %d", len(fakeGPUs)),
					fmt.Sprintf("total %16d bytes", mem.TotalBytes), fmt.Sprintf("free %16d bytes", mem.FreeBytes),
					fmt.Sprintf("budget %16d tokens = %d blocks", b.Tokens, b.Blocks)} {
					if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(s), " ")) {
						t.Errorf("output lacks %q:\n%s", s, out)
					}
				}
				if b.Reason != "" && !strings.Contains(out, "reason: "+b.Reason) {
					t.Errorf("output lacks the reason %q:\n%s", b.Reason, out)
				}
				if c.name == "uuid 70b pressure" {
					assert.True(t, adm.MemoryPressure, "case %q should be under memory pressure: %v", c.name, adm)
				}
			})
		}
	}

	// Faults: a clean exit with the documented status, never a crash.
	faults := []struct {
		env    []string
		args   []string
		code   int
		status string
	}{
		{[]string{"FAKE_NVML_LOST_AFTER=0"}, nil, budgetGPUError, "GPU lost (status 6)"}, // the device count
		{[]string{"FAKE_NVML_LOST_AFTER=2"}, nil, budgetGPUError, "GPU lost (status 6)"}, // the memory read
		{[]string{"FAKE_NVML_LOST_AFTER=3"}, nil, budgetGPUError, "GPU lost (status 6)"}, // the guard's read
		{[]string{"FAKE_NVML_NO_PERMISSION=1"}, nil, budgetGPUError, "status 8"},
		{[]string{"FAKE_NVML_MEMORY_ERROR=3"}, nil, budgetGPUError, "status 7"},
		{nil, []string{"--device", "GPU-ffffffff-none"}, budgetGPUError, "status 9"},
		{nil, []string{"--device", "7"}, budgetGPUError, "status 9"},
		{[]string{"FAKE_NVML_INIT_ERROR=9"}, nil, budgetUnavailable, "NVML unavailable (status 5)"},
		{nil, []string{"--device", "not-a-gpu"}, 2, "status 1"},
	}
	for _, f := range faults {
		for _, bind := range binds {
			env := cleanEnv(append(append([]string{"LD_LIBRARY_PATH=" + fakes["v2"], fakeDevicesEnv()}, f.env...), bind...)...)
			out, code := runExit(t, env, bin, append([]string{lib}, f.args...)...)
			if code != f.code || !strings.Contains(out, f.status) {
				t.Errorf("env %v args %v: exit %d, want %d with %q:\n%s", extra(env), f.args, code, f.code, f.status, out)
			}
			if f.code == budgetGPUError && !strings.Contains(out, fmt.Sprintf("exit %d", f.code)) {
				t.Errorf("env %v args %v: no orderly shutdown (no \"exit %d\" line):\n%s", extra(env), f.args, f.code, out)
			}
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
