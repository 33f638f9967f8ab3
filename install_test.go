// Tests of adprouter installed the ways users install it: a pip wheel in a
// fresh virtual environment away from the checkout, an sdist built with pip,
// ./build.sh install into a prefix that is then moved and used through
// pkg-config and CMake, and go install of the simulator from a module proxy.
// Like router_test.go: skipped under -short, a missing tool skips the test
// that needs it except under CI=true.
package adprouter_test

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// headerVersion is ADPR_VERSION of include/adprouter.h, the one home of the
// release version.
func headerVersion(t *testing.T) string {
	t.Helper()
	hdr, err := os.ReadFile("include/adprouter.h")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#define ADPR_VERSION "([^"]+)"$`).FindSubmatch(hdr)
	if m == nil {
		t.Fatal(`include/adprouter.h has no line #define ADPR_VERSION "X.Y.Z"`)
	}
	return string(m[1])
}

// glibcNeeded is the newest GLIBC_x.y symbol version lib needs, as readelf
// reports it: what the wheel's manylinux tag must say.
func glibcNeeded(t *testing.T, lib string) string {
	t.Helper()
	need(t, "readelf")
	out := run(t, nil, "readelf", "-V", "--wide", lib)
	best := [2]int{}
	for _, m := range regexp.MustCompile(`Name: GLIBC_(\d+)\.(\d+)`).FindAllStringSubmatch(out, -1) {
		var v [2]int
		fmt.Sscan(m[1], &v[0])
		fmt.Sscan(m[2], &v[1])
		if v[0] > best[0] || v[0] == best[0] && v[1] > best[1] {
			best = v
		}
	}
	if best[0] == 0 {
		t.Fatalf("readelf -V %s shows no GLIBC version:\n%s", lib, out)
	}
	return fmt.Sprintf("%d_%d", best[0], best[1])
}

// venv creates a fresh virtual environment under dir and returns its python.
func venv(t *testing.T, dir string) string {
	t.Helper()
	py := need(t, "python3")
	env := filepath.Join(dir, "venv")
	run(t, nil, py, "-m", "venv", env)
	return filepath.Join(env, "bin", "python")
}

// outsideEnv is the environment minus what would point Python at the
// checkout.
func outsideEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHONPATH=") && !strings.HasPrefix(kv, "ADPROUTER_LIBRARY=") {
			env = append(env, kv)
		}
	}
	return env
}

// runIn runs a command in dir with exactly env.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// wheelFiles maps the names in a wheel to their contents.
func wheelFiles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	files := map[string][]byte{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name], err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// pythonTests copies python/tests to dir/python/tests, away from the package
// sources, and returns the modules to run against an installed package: every
// test_*.py (the reference oracle is one of the copied helpers). dir/nvml
// links to the checkout's nvml/ for the fake NVML source test_nvml.py compiles,
// dir/testdata to its testdata/ for the routing fixtures test_binding.py runs.
func pythonTests(t *testing.T, dir string) (testsDir string, modules []string) {
	t.Helper()
	testsDir = filepath.Join(dir, "python", "tests")
	names, err := filepath.Glob("python/tests/*.py") // the test modules and their helpers
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		copyFile(t, n, filepath.Join(testsDir, filepath.Base(n)))
		m := strings.TrimSuffix(filepath.Base(n), ".py")
		if strings.HasPrefix(m, "test_") {
			modules = append(modules, m)
		}
	}
	for _, shared := range []string{"nvml", "testdata"} {
		abs, err := filepath.Abs(shared)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, shared)); err != nil {
			t.Fatal(err)
		}
	}
	return testsDir, modules
}

// pip wheel builds the wheel offline from the checkout; installed into a
// fresh venv in a temporary directory it passes the Python tests with the
// package and library it carries.
func TestWheelInstalled(t *testing.T) {
	library(t) // the -short skip, and build.sh works
	py := need(t, "python3")
	dir := t.TempDir()
	dist := filepath.Join(dir, "dist")
	run(t, nil, py, "-m", "pip", "wheel", "--no-index", "--no-build-isolation", "--no-deps", "-w", dist, ".")
	wheels, _ := filepath.Glob(filepath.Join(dist, "*.whl"))
	if len(wheels) != 1 {
		t.Fatalf("pip wheel wrote %v, want one wheel", wheels)
	}
	version := headerVersion(t)
	files := wheelFiles(t, wheels[0])
	need(t, "readelf")
	libPath := filepath.Join(dir, "libadprouter.so")
	if err := os.WriteFile(libPath, files["adprouter/libadprouter.so"], 0o755); err != nil {
		t.Fatal(err)
	}
	if d := run(t, nil, "readelf", "-d", libPath); !strings.Contains(d, "["+soname(t)+"]") {
		t.Errorf("the wheel's adprouter/libadprouter.so has no soname %s:\n%s", soname(t), d)
	}

	// The tag: pure Python unless the tree has the optional extension.
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	plat := fmt.Sprintf("manylinux_%s_%s", glibcNeeded(t, libPath), arch)
	want := fmt.Sprintf("adprouter-%s-py3-none-%s.whl", version, plat)
	if _, err := os.Stat("python/adprouter/_speedups.c"); err == nil {
		want = "" // tagged for the interpreter when it compiled: TestSdistWithSpeedups checks that
	}
	if got := filepath.Base(wheels[0]); want != "" && got != want {
		t.Errorf("wheel %s, want %s", got, want)
	}
	distInfo := "adprouter-" + version + ".dist-info/"
	modules, err := filepath.Glob("python/adprouter/*.py")
	if err != nil || len(modules) == 0 {
		t.Fatalf("no python/adprouter/*.py to check the wheel against (%v)", err)
	}
	shipped := []string{distInfo + "RECORD", distInfo + "WHEEL"}
	for _, m := range modules {
		shipped = append(shipped, "adprouter/"+filepath.Base(m))
	}
	for _, f := range shipped {
		if _, ok := files[f]; !ok {
			t.Errorf("wheel lacks %s", f)
		}
	}
	// The TensorRT-LLM start-up hook, at the wheel's root so that it lands
	// in site-packages, as in the checkout, and in RECORD.
	for _, f := range []string{"adprouter-trtllm.pth", "_adprouter_startup.py"} {
		if want, err := os.ReadFile("python/" + f); err != nil {
			t.Fatal(err)
		} else if got, ok := files[f]; !ok || string(got) != string(want) {
			t.Errorf("wheel's %s (shipped: %v) differs from python/%s", f, ok, f)
		}
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(f) + `,sha256=[\w-]{43},\d+$`).Match(files[distInfo+"RECORD"]) {
			t.Errorf("RECORD has no line for %s:\n%s", f, files[distInfo+"RECORD"])
		}
	}
	if _, ok := files["adprouter/reference.py"]; ok {
		t.Error("the wheel ships the test oracle adprouter/reference.py; it belongs to python/tests")
	}
	if md := string(files[distInfo+"METADATA"]); !strings.Contains(md, "\nVersion: "+version+"\n") {
		t.Errorf("METADATA does not say Version: %s:\n%.300s", version, md)
	}

	// A fresh venv, away from the checkout, no PYTHONPATH.
	vpy := venv(t, dir)
	env := outsideEnv()
	runIn(t, dir, env, vpy, "-m", "pip", "install", "--no-index", wheels[0])
	const probe = `import adprouter, importlib.metadata as m, os, sys
print(os.path.realpath(adprouter.__file__), os.path.realpath(adprouter.library_path()), adprouter.version(), m.version("adprouter"))`
	got := strings.Fields(runIn(t, dir, env, vpy, "-c", probe))
	site := filepath.Join(dir, "venv", "lib")
	if len(got) != 4 || !strings.HasPrefix(got[0], site) || got[1] != filepath.Join(filepath.Dir(got[0]), "libadprouter.so") {
		t.Fatalf("installed package: %v, want the package and its library under %s", got, site)
	}
	if got[2] != version || got[3] != version {
		t.Errorf("adpr_version() %s and the distribution's version %s, want %s", got[2], got[3], version)
	}
	// A wheel built with the extension must use it once installed.
	if !strings.Contains(filepath.Base(wheels[0]), "-py3-none-") {
		got := strings.TrimSpace(runIn(t, dir, env, vpy, "-c", "import adprouter._accel as a; print(a.speedups is not None)"))
		if got != "True" {
			t.Errorf("%s carries adprouter._speedups but the installed package does not load it", filepath.Base(wheels[0]))
		}
	}
	// The installed hook, end to end: with TRTLLM_ADPROUTER=1 a (fake)
	// TensorRT-LLM's ADPRouter.create returns adprouter.trtllm's router with
	// the options of the TRTLLM_ADPROUTER_* variables; without it the fake's
	// own create runs and nothing imports adprouter.
	fake := filepath.Join(dir, "fake")
	run(t, nil, py, "python/tests/fake_trtllm.py", fake)
	const hook = `import json, sys
from types import SimpleNamespace as NS
import tensorrt_llm._torch.pyexecutor.scheduler.adp_router as m
before = "adprouter" in sys.modules
dist = NS(tp_rank=0, tp_size=2, mapping=NS(dp_size=2), has_cp_helix=False, tp_allgather=lambda o: [o, o])
r = m.ADPRouter.create(dist, NS(enable_block_reuse=True, tokens_per_block=32), NS(enable_kv_cache_aware_routing=True))
print(json.dumps([r if isinstance(r, str) else type(r).__module__, getattr(r, "needs_prefix_matches", None), before]))`
	var hookEnv []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TRTLLM") && !strings.HasPrefix(kv, "TLLM") && !strings.HasPrefix(kv, "ADPROUTER_") {
			hookEnv = append(hookEnv, kv)
		}
	}
	hookEnv = append(hookEnv, "PYTHONPATH="+fake, "TRTLLM_ADPROUTER_PRESET=index")
	for _, tc := range []struct{ env, want string }{
		{"TRTLLM_ADPROUTER=1", `["adprouter.trtllm", false, true]`},
		{"", `["theirs", null, false]`}, // unset
	} {
		e := slices.Clone(hookEnv)
		if tc.env != "" {
			e = append(e, tc.env)
		}
		got := strings.TrimSpace(runIn(t, dir, e, vpy, "-c", hook))
		if got != tc.want {
			t.Errorf("%s: the installed hook gives %s, want %s", tc.env, got, tc.want)
		}
	}

	testsDir, modules := pythonTests(t, dir)
	out := runIn(t, testsDir, env, vpy, append([]string{"-m", "unittest"}, modules...)...)
	t.Log(lastLines(out, 3))
}

// The build backend's own tests: no speedups without a compiler, its
// pyproject.toml reader, the version's home.
func TestBuildBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	py := need(t, "python3")
	out := run(t, nil, py, "-m", "unittest", "discover", "-s", "python/build_backend", "-v")
	t.Log(lastLines(out, 3))
}

// A minimal CPython extension, standing in for python/adprouter/_speedups.c
// while the tree has none.
const fakeSpeedups = `#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "adprouter._speedups", NULL, -1, methods};
PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
`

// ./build.sh sdist writes a source distribution that pip installs (with
// build isolation, offline); with python/adprouter/_speedups.c and Python's
// headers present the wheel carries the extension and is tagged for the
// interpreter.
func TestSdistWithSpeedups(t *testing.T) {
	library(t)
	need(t, "python3")
	version := headerVersion(t)
	out := run(t, nil, "./build.sh", "sdist")
	sdist := strings.TrimSpace(lastLines(out, 1))
	if filepath.Base(sdist) != "adprouter-"+version+".tar.gz" {
		t.Fatalf("./build.sh sdist wrote %q, want adprouter-%s.tar.gz", sdist, version)
	}
	dir := t.TempDir()
	src := extractTarGz(t, sdist, filepath.Join(dir, "src"))
	tree := filepath.Join(src, "adprouter-"+version)
	for _, f := range []string{"PKG-INFO", "pyproject.toml", "build.sh", "go.mod", "include/adprouter.h",
		"include/adprouter.hpp", "capi/capi.c", "python/adprouter/__init__.py", "python/adprouter-trtllm.pth", "python/_adprouter_startup.py"} {
		if _, err := os.Stat(filepath.Join(tree, f)); err != nil {
			t.Errorf("sdist lacks %s", f)
		}
	}
	ext := filepath.Join(tree, "python", "adprouter", "_speedups.c")
	if _, err := os.Stat(ext); err != nil {
		if err := os.WriteFile(ext, []byte(fakeSpeedups), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vpy := venv(t, dir)
	env := outsideEnv()
	runIn(t, dir, env, vpy, "-m", "pip", "install", "--no-index", tree)
	const probe = `import sys, sysconfig, os
h = os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
import adprouter, adprouter._speedups
print("cp%d%d" % sys.version_info[:2], h, adprouter.version())`
	got := strings.Fields(runIn(t, dir, env, vpy, "-c", probe))
	if len(got) != 3 || got[1] != "True" {
		if os.Getenv("CI") != "" {
			t.Fatalf("probe %v: CI needs Python.h (python3-dev)", got)
		}
		t.Skipf("no Python.h for %s; the extension cannot be built here", vpy)
	}
	if got[2] != version {
		t.Errorf("adpr_version() %s, want %s", got[2], version)
	}
	record := runIn(t, dir, env, vpy, "-c",
		`import importlib.metadata as m; print(m.distribution("adprouter").read_text("WHEEL"))`)
	if !strings.Contains(record, "Tag: "+got[0]+"-"+got[0]+"-manylinux_") {
		t.Errorf("WHEEL of the installed wheel:\n%s\nwant Tag: %s-%s-manylinux_...", record, got[0], got[0])
	}
}

func extractTarGz(t *testing.T, archive, dst string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dst
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, h.Name)
		if !strings.HasPrefix(p, dst+string(filepath.Separator)) || h.Typeflag != tar.TypeReg {
			t.Fatalf("sdist entry %q: want regular files inside one directory", h.Name)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, os.FileMode(h.Mode)&0o777); err != nil {
			t.Fatal(err)
		}
	}
}

// ./build.sh install lays out the prefix; moved elsewhere it still works
// through pkg-config (a C program) and CMake's find_package (the C++
// quickstart on the wrapper), and CMake refuses an incompatible version.
func TestInstallPrefix(t *testing.T) {
	library(t)
	cc := need(t, "gcc")
	need(t, "g++")
	pkgConfig := need(t, "pkg-config")
	cmake := need(t, "cmake")
	version := headerVersion(t)
	dir := t.TempDir()
	run(t, nil, "./build.sh", "install", filepath.Join(dir, "staged"))
	prefix := filepath.Join(dir, "moved", "prefix")
	if err := os.MkdirAll(filepath.Dir(prefix), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "staged"), prefix); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(prefix, "lib", "libadprouter.so")); err != nil || target != soname(t) {
		t.Errorf("lib/libadprouter.so -> %q (%v), want -> %s", target, err, soname(t))
	}
	for _, f := range []string{"include/adprouter.h", "include/adprouter.hpp", "lib/pkgconfig/adprouter.pc",
		"lib/cmake/adprouter/adprouterConfig.cmake", "lib/cmake/adprouter/adprouterConfigVersion.cmake"} {
		data, err := os.ReadFile(filepath.Join(prefix, f))
		if err != nil {
			t.Errorf("install: %v", err)
		} else if strings.Contains(string(data), filepath.Join(dir, "staged")) {
			t.Errorf("%s names the install prefix: not relocatable", f)
		}
	}

	// pkg-config: a plain C program.
	pcEnv := []string{"PKG_CONFIG_PATH=" + filepath.Join(prefix, "lib", "pkgconfig")}
	if got := strings.TrimSpace(run(t, pcEnv, pkgConfig, "--modversion", "adprouter")); got != version {
		t.Errorf("pkg-config --modversion adprouter = %q, want %s", got, version)
	}
	flags := strings.Fields(run(t, pcEnv, pkgConfig, "--cflags", "--libs", "adprouter"))
	libdir := strings.TrimSpace(run(t, pcEnv, pkgConfig, "--variable=libdir", "adprouter"))
	bin := filepath.Join(dir, "link_test")
	args := append([]string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-o", bin, "examples/c/link_test.c"}, flags...)
	run(t, nil, cc, append(args, "-Wl,-rpath,"+libdir)...)
	run(t, nil, bin)

	// CMake: the C++ quickstart through find_package(adprouter X.Y).
	build := filepath.Join(dir, "cmake")
	run(t, nil, cmake, "-S", "examples/cpp", "-B", build, "-DCMAKE_PREFIX_PATH="+prefix)
	run(t, nil, cmake, "--build", build)
	out := run(t, nil, filepath.Join(build, "quickstart"))
	if !strings.Contains(out, "adprouter "+version+" (header "+version+")") ||
		!regexp.MustCompile(`(?m)^request 1 \(600 tokens\) -> rank 0: cold-start warmup$`).MatchString(out) {
		t.Errorf("CMake-built quickstart:\n%s", out)
	}

	// An incompatible version request fails at configure time.
	proj := filepath.Join(dir, "v")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	major := strings.SplitN(version, ".", 2)[0]
	if err := os.WriteFile(filepath.Join(proj, "CMakeLists.txt"), []byte(fmt.Sprintf(
		"cmake_minimum_required(VERSION 3.16)\nproject(v LANGUAGES NONE)\nfind_package(adprouter %s9 REQUIRED)\n",
		major)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cmake, "-S", proj, "-B", filepath.Join(proj, "b"), "-DCMAKE_PREFIX_PATH="+prefix)
	if b, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("find_package(adprouter %s9) succeeded against %s:\n%s", major, version, b)
	}
}

// go install .../cmd/adprouter-sim@latest works: served by a module proxy
// (a file:// one holding this tree as the release v<ADPR_VERSION>), the
// module resolves, builds with its own go.sum, and the binary runs.
func TestGoInstallLatest(t *testing.T) {
	library(t)
	git := need(t, "git")
	goTool := os.Getenv("GO") // as build.sh: $GO, go on PATH, else the running toolchain's
	if goTool == "" {
		if p, err := exec.LookPath("go"); err == nil {
			goTool = p
		} else {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
	}
	const module = "github.com/adprouter/adprouter"
	if gomod, err := os.ReadFile("go.mod"); err != nil || !strings.HasPrefix(string(gomod), "module "+module+"\n") {
		t.Fatalf("go.mod does not declare module %s (%v)", module, err)
	}
	version := "v" + headerVersion(t)
	dir := t.TempDir()
	at := filepath.Join(dir, "proxy", module, "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(at, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gomod, _ := os.ReadFile("go.mod")
	write("list", version+"\n")
	write(version+".info", fmt.Sprintf(`{"Version":%q,"Time":"2026-01-01T00:00:00Z"}`, version))
	write(version+".mod", string(gomod))
	// The module zip: the tracked files, as a release tag would hold them.
	zf, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(zf)
	for _, name := range strings.Split(strings.TrimSpace(run(t, nil, git, "ls-files")), "\n") {
		data, err := os.ReadFile(name)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.Create(module + "@" + version + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zf.Close()

	bin := filepath.Join(dir, "bin")
	env := []string{
		"GOBIN=" + bin, "GOFLAGS=", "GONOSUMDB=" + module, "GOWORK=off",
		// Our module from the file proxy; its dependencies from the module
		// cache or, failing that, the public proxy.
		"GOPROXY=file://" + filepath.Join(dir, "proxy") + ",https://proxy.golang.org",
	}
	runIn(t, dir, append(os.Environ(), env...), goTool, "install", module+"/cmd/adprouter-sim@latest")
	if info := run(t, nil, goTool, "version", "-m", filepath.Join(bin, "adprouter-sim")); !regexp.MustCompile(
		`(?m)^\s+mod\s+` + regexp.QuoteMeta(module) + `\s+` + regexp.QuoteMeta(version) + `\s`).MatchString(info) {
		t.Errorf("adprouter-sim was not built from %s@%s:\n%s", module, version, info)
	}
	out, _ := exec.Command(filepath.Join(bin, "adprouter-sim"), "-h").CombinedOutput()
	if !strings.Contains(string(out), "adprouter-sim: compare ADP routing policies") {
		t.Errorf("installed adprouter-sim -h:\n%s", out)
	}
}

// Every find_package(adprouter X.Y) the tree writes requests the header's
// release: a 0.x minor bump breaks the API, and the package's version file
// refuses the old minor, so the examples move with ADPR_VERSION. Cheap, so it
// runs with -short too, ahead of TestInstallPrefix's install.
func TestFindPackageRequestsHeaderVersion(t *testing.T) {
	parts := strings.SplitN(headerVersion(t), ".", 3)
	want := parts[0] + "." + parts[1]
	re := regexp.MustCompile(`find_package\(adprouter ([0-9][0-9.]*)`)
	seen := 0
	for _, f := range []string{"examples/cpp/CMakeLists.txt", "packaging/adprouterConfig.cmake.in"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(data), -1) {
			seen++
			if m[1] != want {
				t.Errorf("%s: find_package(adprouter %s), want %s (ADPR_VERSION %s)", f, m[1], want, headerVersion(t))
			}
		}
	}
	if seen == 0 {
		t.Error("no find_package(adprouter X.Y) found in the examples: the check checks nothing")
	}
}
