// Package fakenvml builds the fake NVML driver library of the tests,
// nvml/testdata/fakenvml/fake_nvml.c, into a libnvidia-ml.so.1: the one
// recipe that the nvml package's tests and the root end-to-end tests share.
package fakenvml

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Soname is the file name, and the soname, of the built library: what the
// nvml package's stubs load.
const Soname = "libnvidia-ml.so.1"

// Source returns the path of fake_nvml.c.
func Source() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "nvml", "testdata", "fakenvml", "fake_nvml.c")
}

// Build compiles the fake with the C compiler cc into dir/Soname, with extra
// cflags (e.g. -DFAKE_NVML_NO_V2, which leaves out
// nvmlDeviceGetMemoryInfo_v2). The error carries the compiler's output.
func Build(cc, dir string, cflags ...string) error {
	args := append([]string{"-shared", "-fPIC", "-Wall", "-Wl,-soname," + Soname,
		"-o", filepath.Join(dir, Soname)}, cflags...)
	args = append(args, Source(), "-pthread")
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	return nil
}
