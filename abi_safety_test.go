// The C boundary never takes its host down: panics injected into every
// export are recovered (fault-injection build), wild pointers come back as a
// status, calls in a forked child refuse before entering Go, and the public
// header is compiled against the implementation. Skipped under -short.
package adprouter_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	faultOnce sync.Once
	faultLib  string
	faultErr  error
	faultOut  []byte
)

// faultLibrary builds the library with -tags adpr_faultinject (through
// build.sh, the one build recipe) into its own directory, once.
func faultLibrary(t *testing.T) string {
	t.Helper()
	library(t) // skips under -short, like every end-to-end test
	faultOnce.Do(func() {
		dir, err := os.MkdirTemp("", "adpr-faultinject-")
		if err != nil {
			faultErr = err
			return
		}
		cmd := exec.Command("./build.sh", "build")
		cmd.Env = append(os.Environ(), "ADPROUTER_BUILD_DIR="+dir, "ADPROUTER_BUILD_TAGS=adpr_faultinject")
		faultOut, faultErr = cmd.CombinedOutput()
		faultLib = filepath.Join(dir, "libadprouter.so")
	})
	if faultErr != nil {
		t.Fatalf("fault-injection build: %v\n%s", faultErr, faultOut)
	}
	return faultLib
}

// faultsProgram compiles capi/testdata/faults.c.
func faultsProgram(t *testing.T) string {
	t.Helper()
	cc := need(t, "gcc")
	bin := filepath.Join(t.TempDir(), "faults")
	run(t, nil, cc, "-std=c11", "-D_DEFAULT_SOURCE", "-O1", "-Wall", "-Wextra", "-Werror", "-Iinclude",
		"-o", bin, "capi/testdata/faults.c", "-ldl")
	return bin
}

func runFaults(t *testing.T, lib, mode string) {
	t.Helper()
	runChecks(t, nil, faultsProgram(t), lib, mode)
}

// A panic injected into each export, before and inside a router's lock,
// returns ADPR_ERR_INTERNAL from C; the poisoned router refuses further
// calls but destroy.
func TestPanicsRecoveredC(t *testing.T) {
	runFaults(t, faultLibrary(t), "inject")
}

// The same from Python: InternalError, never a dead interpreter.
func TestPanicsRecoveredPython(t *testing.T) {
	lib := faultLibrary(t)
	py := need(t, "python3")
	env := []string{"PYTHONPATH=python", "ADPROUTER_LIBRARY=" + lib, "ADPROUTER_FAULT_INJECTION=1"}
	out := run(t, env, py, "-m", "unittest", "discover", "-s", "python/tests", "-p", "test_faults.py", "-v")
	if !strings.Contains(out, "OK") || strings.Contains(out, "skipped") {
		t.Errorf("python fault tests did not all run:\n%s", out)
	}
	t.Log(lastLines(out, 2))
}

// Wild and near-NULL pointers in every pointer argument of the release
// library come back as a status.
func TestWildPointers(t *testing.T) {
	runFaults(t, library(t), "pointers")
}

// In a child after fork() every call returns ADPR_ERR_FORKED at once.
func TestForkedChildRefuses(t *testing.T) {
	runFaults(t, library(t), "fork")
}

// The public functions are defined in C against include/adprouter.h: a
// prototype changed in the header alone fails the build.
func TestHeaderCompiledAgainstImplementation(t *testing.T) {
	library(t)
	goTool := os.Getenv("GO")
	if goTool == "" {
		goTool = need(t, "go")
	}
	files, err := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a checkout)", err)
	}
	dir := t.TempDir()
	for _, f := range strings.Fields(string(files)) {
		src, err := os.Lstat(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if src.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(f)
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hdr := filepath.Join(dir, "include", "adprouter.h")
	data, _ := os.ReadFile(hdr)
	const proto = "adpr_status adpr_router_destroy(adpr_router router);"
	if !strings.Contains(string(data), proto) {
		t.Fatalf("include/adprouter.h no longer declares %q; update this test", proto)
	}
	mutated := strings.Replace(string(data), proto, "adpr_status adpr_router_destroy(uint32_t router);", 1)
	if err := os.WriteFile(hdr, []byte(mutated), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, "build", "-buildmode=c-shared", "-trimpath", "-o", filepath.Join(dir, "lib.so"), "./capi")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O1 -Wno-deprecated-declarations")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "conflicting types for ‘adpr_router_destroy’") &&
		!strings.Contains(string(out), "conflicting types for 'adpr_router_destroy'") {
		t.Errorf("a header prototype that differs from the implementation built (err %v):\n%s", err, out)
	}
}

// The C++17 wrapper include/adprouter.hpp: RAII moves, typed options, errors
// with status and message, span size checks, results equal to the C API's.
func TestCppWrapper(t *testing.T) {
	lib := library(t)
	cxx := need(t, "g++")
	dir := filepath.Dir(lib)
	bin := filepath.Join(t.TempDir(), "hpp_test")
	run(t, nil, cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Iinclude",
		"-o", bin, "capi/testdata/hpp_test.cpp", "-L"+dir, "-ladprouter", "-Wl,-rpath,"+dir)
	runChecks(t, nil, bin)
}
