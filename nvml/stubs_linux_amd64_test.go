//go:build cgo

package nvml

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStubsForwardAllRegisters builds the generated stubs into a C program
// (testdata/stubcheck) together with a stand-in libnvidia-ml.so.1 whose
// functions check that every integer, vector, stack and variadic argument
// arrives intact through the stubs' slow path (first call) and fast path;
// that a missing library or function gives NVML_ERROR_UNINITIALIZED or
// NVML_ERROR_FUNCTION_NOT_FOUND; that concurrent first calls are safe; and
// that resolved pointers survive dlclose of the library.
func TestStubsForwardAllRegisters(t *testing.T) {
	cc := needGCC(t)
	dir := t.TempDir()
	build := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
		}
	}
	build("-shared", "-fPIC", "-Wall", "-Wl,-soname,libnvidia-ml.so.1", "-o", filepath.Join(dir, "libnvidia-ml.so.1"),
		filepath.Join("testdata", "stubcheck", "target.c"))
	bin := filepath.Join(dir, "stubcheck")
	build("-O2", "-Wall", "-pthread", "-o", bin, filepath.Join("testdata", "stubcheck", "stubcheck.c"),
		"zz_stubs_linux_amd64.S", "resolve_linux_amd64.c", "-ldl")

	cmd := exec.Command(bin)
	cmd.Env = []string{"LD_LIBRARY_PATH=" + dir}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("stubcheck: %v\n%s", err, out)
	}
}
