// End-to-end tests of the shipped artefact: build libadprouter.so exactly as
// ./build.sh does, then drive it from C++ (dlopen RTLD_NOW), plain C
// (-ladprouter) and Python (ctypes), the way hosts use it. Skipped under
// go test -short. A missing compiler or interpreter skips the test that needs
// it, except under CI=true, where it is a failure: CI must run everything.
package adprouter_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildErr  error
	buildOut  []byte
)

// library builds the library once per test binary and returns its path.
func library(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	buildOnce.Do(func() {
		cmd := exec.Command("./build.sh", "build")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("./build.sh build: %v\n%s", buildErr, buildOut)
	}
	p, err := filepath.Abs("build/libadprouter.so")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// abiVersion is ADPR_ABI_VERSION of include/adprouter.h.
func abiVersion(t testing.TB) string {
	t.Helper()
	h, err := os.ReadFile("include/adprouter.h")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#define ADPR_ABI_VERSION (\d+)$`).FindSubmatch(h)
	if m == nil {
		t.Fatal("include/adprouter.h has no #define ADPR_ABI_VERSION N")
	}
	return string(m[1])
}

// soname is the library's soname, libadprouter.so.N for N = the ABI
// version (build.sh derives it the same way).
func soname(t testing.TB) string { return "libadprouter.so." + abiVersion(t) }

// need returns the path of a tool, skipping the test (failing it under CI)
// when the tool is missing.
func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found: CI must install it (.ci/run)", tool)
		}
		t.Skipf("%s not found; skipping", tool)
	}
	return p
}

func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// dynamicSymbols lists the names in lib's dynamic symbol table that nm -D
// prints with filter (--defined-only, --undefined-only), without their
// @version suffixes and without the version nodes (type A).
func dynamicSymbols(t *testing.T, lib, filter string) []string {
	t.Helper()
	need(t, "nm")
	var names []string
	for _, line := range strings.Split(run(t, nil, "nm", "-D", filter, lib), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[len(f)-2] == "A" {
			continue
		}
		name, _, _ := strings.Cut(f[len(f)-1], "@")
		names = append(names, name)
	}
	return names
}

// The library exports only adpr_* functions and carries its soname.
func TestLibrarySymbols(t *testing.T) {
	lib := library(t)
	exported := dynamicSymbols(t, lib, "--defined-only")
	for _, name := range exported {
		if !strings.HasPrefix(name, "adpr_") {
			t.Errorf("exported symbol %q, want only adpr_*", name)
		}
	}
	if len(exported) < 6 {
		t.Errorf("exported %v, want the adpr_* functions of include/adprouter.h", exported)
	}
	need(t, "readelf")
	if d := run(t, nil, "readelf", "-d", lib); !strings.Contains(d, "["+soname(t)+"]") {
		t.Errorf("readelf -d shows no soname %s:\n%s", soname(t), d)
	}
}

// Every function the header declares is exported by the library.
func TestHeaderMatchesExports(t *testing.T) {
	lib := library(t)
	hdr, err := os.ReadFile("include/adprouter.h")
	if err != nil {
		t.Fatal(err)
	}
	declared := regexp.MustCompile(`\b(adpr_[a-z_0-9]+)\(`).FindAllStringSubmatch(string(hdr), -1)
	exported := dynamicSymbols(t, lib, "--defined-only")
	for _, m := range declared {
		if !slices.Contains(exported, m[1]) {
			t.Errorf("%s is declared in include/adprouter.h but not exported", m[1])
		}
	}
}

// The C++ harness loads the library with dlopen(RTLD_NOW) and checks the
// whole ABI, also with LD_BIND_NOW=1.
func TestCppHarness(t *testing.T) {
	lib := library(t)
	cxx := need(t, "g++")
	bin := filepath.Join(t.TempDir(), "harness")
	run(t, nil, cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-Iinclude",
		"-o", bin, "capi/testdata/harness.cpp", "-ldl", "-lpthread")
	for _, env := range [][]string{nil, {"LD_BIND_NOW=1"}} {
		out := runChecks(t, env, bin, lib)
		// How many shared routing fixtures (testdata/routing) the harness ran.
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "NOTE routing fixtures:") {
				t.Log(line)
			}
		}
	}
	// The measurement mode docs/performance.md quotes runs, one call per gap:
	// seven gaps at each of two batch sizes, each row ending in the library's
	// threads' CPU (a share of a core; "-" where the system does not say).
	out := run(t, nil, bin, lib, "--idle", "1")
	if rows := regexp.MustCompile(`(?m)^ +(0|1|5|20) +(-|busy|asleep) +[0-9.]+ \(.* ([0-9]+\.[0-9]%|-)$`).FindAllString(out, -1); len(rows) != 14 {
		t.Errorf("harness --idle: %d table rows, want 14:\n%s", len(rows), out)
	}
}

// allPassed matches the closing line of the C and C++ test programs.
var allPassed = regexp.MustCompile(`(?m)^\d+ passed, 0 failed$`)

// runChecks runs a C or C++ test program, which prints one line per check
// and "N passed, M failed", and fails t unless every check passed. It
// returns the program's output.
func runChecks(t *testing.T, env []string, bin string, args ...string) string {
	t.Helper()
	out := run(t, env, bin, args...)
	if !allPassed.MatchString(out) {
		t.Errorf("%s %s (env %v) did not pass:\n%s", filepath.Base(bin), strings.Join(args, " "), env, out)
		return out
	}
	t.Log(lastLines(out, 1))
	return out
}

// Plain C linking against -ladprouter resolves and runs.
func TestCLink(t *testing.T) {
	lib := library(t)
	cc := need(t, "gcc")
	dir := filepath.Dir(lib)
	bin := filepath.Join(t.TempDir(), "link_test")
	run(t, nil, cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-Iinclude", "-o", bin,
		"examples/c/link_test.c", "-L"+dir, "-ladprouter", "-Wl,-rpath,"+dir)
	for _, env := range [][]string{nil, {"LD_BIND_NOW=1"}} {
		run(t, env, bin)
	}
}

// The Python binding's test suite (including the differential test against
// the pure-Python reference), and loading under default ctypes.CDLL and
// LD_BIND_NOW=1.
func TestPython(t *testing.T) {
	lib := library(t)
	py := need(t, "python3")
	env := []string{"PYTHONPATH=python", "ADPROUTER_LIBRARY=" + lib}
	out := run(t, env, py, "-m", "unittest", "discover", "-s", "python/tests", "-v")
	t.Log(lastLines(out, 3))
	const load = `import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); l.adpr_abi_version.restype = ctypes.c_uint32; print(l.adpr_abi_version())`
	for _, e := range [][]string{nil, {"LD_BIND_NOW=1"}} {
		if got := strings.TrimSpace(run(t, e, py, "-c", load, lib)); got != abiVersion(t) {
			t.Errorf("ctypes.CDLL (env %v): adpr_abi_version() = %q, want %s", e, got, abiVersion(t))
		}
	}
}

// The compiled path's safety suites once more under python3 -X dev (the
// debug hooks, faulthandler, warnings on) with PYTHONMALLOC=malloc: the
// hostile-object cases of python/tests/test_hostile.py (each in a child
// process with a hard timeout, under the same flags), the C packer's tests
// and the binding's safety tests.
func TestPythonDevMode(t *testing.T) {
	lib := library(t)
	py := need(t, "python3")
	env := []string{"PYTHONPATH=python" + string(os.PathListSeparator) + "python/tests", "ADPROUTER_LIBRARY=" + lib,
		"PYTHONMALLOC=malloc"}
	out := run(t, env, py, "-X", "dev", "-m", "unittest", "-v", "test_hostile", "test_speedups", "test_safety")
	t.Log(lastLines(out, 3))
}

// A subset of the hostile-object cases (python/tests/test_hostile.py
// --valgrind: those marked valgrind=True) under valgrind's memcheck, in one
// process: any invalid read, write or free in _speedups.c, CPython or ctypes
// fails it (--error-exitcode), as does a case whose paths disagree.
// PYTHONMALLOC=malloc makes Python's objects malloc blocks memcheck tracks;
// --undef-value-errors=no drops CPython's known uninitialised-value noise;
// python/tests/valgrind.supp and GODEBUG keep the Go runtime's own accesses
// out (RDTSCP, which this valgrind cannot decode, and the AES hash's
// over-reads). About 10 s here; CI installs valgrind (.ci/run).
func TestPythonHostileValgrind(t *testing.T) {
	lib := library(t)
	py := need(t, "python3")
	vg := need(t, "valgrind")
	env := []string{"PYTHONPATH=python", "ADPROUTER_LIBRARY=" + lib}
	// valgrind must run the interpreter itself, not a wrapper script (pyenv's
	// python3 is one), and the cases need the C packer ./build.sh builds.
	probe := `import sys; from adprouter import _accel; print(sys.executable); print(_accel.speedups is not None)`
	got := strings.Fields(run(t, env, py, "-c", probe))
	if len(got) != 2 {
		t.Fatalf("probe printed %q", got)
	}
	if got[1] != "True" {
		if os.Getenv("CI") != "" {
			t.Fatal("adprouter._speedups was not built: CI must build it (python3-dev, .ci/run)")
		}
		t.Skip("adprouter._speedups not built; skipping")
	}
	env = append(env, "PYTHONMALLOC=malloc", "GODEBUG=cpu.rdtscp=off,cpu.aes=off", "ADPROUTER_HOSTILE_TIMEOUT=300")
	// --fair-sched: the Go runtime's spinning threads otherwise hold
	// valgrind's one running thread for seconds at a time.
	out := run(t, env, vg, "--quiet", "--fair-sched=yes", "--error-exitcode=99", "--undef-value-errors=no",
		"--suppressions=python/tests/valgrind.supp", got[0], "python/tests/test_hostile.py", "--valgrind")
	t.Log(lastLines(out, 1))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
