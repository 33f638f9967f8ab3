// Stubgen writes the x86-64 forwarding stubs that let package nvml, and any
// c-shared library built from it, load without libnvidia-ml.so.1.
//
// go-nvml's cgo code calls several hundred nvml* C functions and links with
// --unresolved-symbols=ignore-in-object-files, so a binary importing it has
// those symbols undefined: a shared library then fails to load under
// RTLD_NOW or LD_BIND_NOW=1, and a call made before the driver library is
// loaded kills the process with "symbol lookup error". Stubgen emits one
// hidden assembly function per symbol that go-nvml references. Each looks the
// real function up in the already-loaded libnvidia-ml.so.1 on its first call
// (see resolve_linux_amd64.c), caches it, and tail-jumps to it; when the
// library or the symbol is absent it returns an NVML error code instead.
//
// Usage (from the nvml package directory, normally through go generate):
//
//	go run ./internal/stubgen [-dir MODULE_DIR] [-version VERSION] [-o FILE]
//
// Without -dir the go-nvml module directory and version come from
// "go list -m github.com/NVIDIA/go-nvml", so upgrading go-nvml in go.mod and
// running "go generate ./nvml" regenerates the stubs for the new version.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// modulePath is the module whose C references are stubbed.
const modulePath = "github.com/NVIDIA/go-nvml"

func main() {
	dir := flag.String("dir", "", "go-nvml module directory (default: from go list -m)")
	version := flag.String("version", "", "go-nvml module version recorded in the output (default: from go list -m)")
	out := flag.String("o", "zz_stubs_linux_amd64.S", "output file")
	flag.Parse()

	if err := run(*dir, *version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "stubgen:", err)
		os.Exit(1)
	}
}

func run(dir, version, out string) error {
	if dir == "" || version == "" {
		d, v, err := locateModule()
		if err != nil {
			return err
		}
		if dir == "" {
			dir = d
		}
		if version == "" {
			version = v
		}
	}
	syms, err := Collect(filepath.Join(dir, "pkg", "nvml"))
	if err != nil {
		return err
	}
	src, err := Generate(syms, modulePath+"@"+version)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(out); err == nil && bytes.Equal(old, src) {
		return nil // unchanged: keep the file's timestamp
	}
	return os.WriteFile(out, src, 0o644)
}

// locateModule asks the go command where the go-nvml module of the current
// build list lives and which version it is.
func locateModule() (dir, version string, err error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}\t{{.Version}}", modulePath)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("go list -m %s: %v (is it required in go.mod and downloaded?)", modulePath, err)
	}
	f := strings.Split(strings.TrimSpace(string(b)), "\t")
	if len(f) != 2 || f[0] == "" {
		return "", "", fmt.Errorf("go list -m %s: got %q, want \"DIR\\tVERSION\" (is the module downloaded? try go mod download %s)", modulePath, b, modulePath)
	}
	return f[0], f[1], nil
}
