//go:build cgo

package nvml_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
		out, err := exec.Command(cc, args...).CombinedOutput()
		require.NoError(t, err, "%s %s\n%s", cc, strings.Join(args, " "), out)
	}
	build("-shared", "-fPIC", "-Wall", "-Wl,-soname,libnvidia-ml.so.1", "-o", filepath.Join(dir, "libnvidia-ml.so.1"),
		filepath.Join("testdata", "stubcheck", "target.c"))
	bin := filepath.Join(dir, "stubcheck")
	build("-O2", "-Wall", "-pthread", "-o", bin, filepath.Join("testdata", "stubcheck", "stubcheck.c"),
		"zz_stubs_linux_amd64.S", "resolve_linux_amd64.c", "-ldl")

	cmd := exec.Command(bin)
	cmd.Env = []string{"LD_LIBRARY_PATH=" + dir}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "stubcheck\n%s", out)
	require.Equal(t, "ok", strings.TrimSpace(string(out)), "stubcheck's output")
}
