package nvmltest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DriverSoname is the file name, and the soname, of the library that
// BuildDriver makes: what the nvml package's stubs and go-nvml load.
const DriverSoname = "libnvidia-ml.so.1"

// DriverSource is the C source of the fake NVML driver library,
// testdata/fake_nvml.c: a libnvidia-ml.so.1 whose GPUs, memory figures and
// failures are set through FAKE_NVML_* environment variables (its header
// comment lists them). The Go tests build it with BuildDriver; the Python
// tests compile the file itself.
//
//go:embed testdata/fake_nvml.c
var DriverSource string

// BuildDriver compiles DriverSource with the C compiler cc into
// dir/DriverSoname, with extra cflags (e.g. -DFAKE_NVML_NO_V2, which leaves
// out nvmlDeviceGetMemoryInfo_v2). Put dir on LD_LIBRARY_PATH of a child
// process to run the real go-nvml path against it. The error carries the
// compiler's output.
func BuildDriver(cc, dir string, cflags ...string) error {
	src, err := os.MkdirTemp("", "fakenvml-src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	file := filepath.Join(src, "fake_nvml.c")
	if err := os.WriteFile(file, []byte(DriverSource), 0o644); err != nil {
		return err
	}
	args := append([]string{"-shared", "-fPIC", "-Wall", "-Wl,-soname," + DriverSoname,
		"-o", filepath.Join(dir, DriverSoname)}, cflags...)
	args = append(args, file, "-pthread")
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	return nil
}
