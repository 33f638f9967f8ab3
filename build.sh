#!/usr/bin/env bash
# adprouter's one entry point.
#
#   ./build.sh          build everything (as build) and run the demo: the C++
#                       and Python quickstarts route a batch on the default
#                       configuration and print where each request went
#   ./build.sh build    build build/libadprouter.so (release), the Python
#                       extension and the example programs (build/quickstart,
#                       build/nvml_budget), and print where they are
#   ./build.sh library  build build/libadprouter.so only (what the Python
#                       build backend runs)
#   ./build.sh test     everything CI checks, talking as it goes: gofmt, go
#                       vet, then go test ./... (the Go packages; router_test.go
#                       and the other root tests build the library and run
#                       the C, C++, Python, MPI, install and documentation
#                       suites), one line per package and per long suite, and
#                       a summary naming every skipped test and why; then the
#                       router's tests in the invariants build (-tags
#                       invariants: incremental state rechecked as it changes)
#   ./build.sh bench    Go, C and Python benchmarks and a simulator sweep
#   ./build.sh soak [N] millions of good and bad calls on every export, with
#                       resident memory checked flat (default N = 200000
#                       rounds of ~15 calls; not part of test)
#   ./build.sh install PREFIX
#                       install the library, headers, pkg-config file and CMake
#                       package under PREFIX (relocatable)
#   ./build.sh wheel    build the Python wheel (library inside) into build/dist/
#   ./build.sh sdist    build the Python source distribution into build/dist/
#   ./build.sh version  print the release version (ADPR_VERSION)
#   ./build.sh help     print this text
#
# Environment: GO (default: go on PATH, else /usr/local/go/bin/go), CXX (g++),
# PYTHON (python3), ADPROUTER_BUILD_DIR (default build/; the Python build
# backend builds the library through this script into a temporary one, the
# tests a fault-injection build), ADPROUTER_BUILD_TAGS (Go build tags; the
# tests use adpr_faultinject).
set -euo pipefail
CALLER_PWD=$PWD # relative PREFIX arguments are relative to the caller
cd "$(dirname "$0")"
ROOT=$PWD
BUILD=${ADPROUTER_BUILD_DIR:-$ROOT/build}
PYTHON=${PYTHON:-python3}
if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi
export GO
CXX=${CXX:-g++}
# go-nvml's cgo code calls NVML functions the header marks deprecated; the
# warnings are noise for us.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"

# soname prints the library's soname, libadprouter.so.N for N =
# ADPR_ABI_VERSION of include/adprouter.h (the one home of both).
soname() {
  echo "libadprouter.so.$(sed -n 's/^#define ADPR_ABI_VERSION \([0-9]*\)$/\1/p' "$ROOT/include/adprouter.h")"
}

# The library's Go runtime settings (GODEBUG syntax), built in as the
# runtime's defaults; the host's GODEBUG variable still overrides each.
# schedtrace=2147483647 keeps the runtime's monitor thread (sysmon) polling
# every 10 ms while the library is idle, rather than sleeping until a call
# wakes it: a call then neither pays that wake nor, mostly, meets the monitor
# preempting it (docs/performance.md, "Called once per iteration"). The
# price: the polling's CPU (a few % of a core while an engine calls the
# library every 5-20 ms) and the tracing the setting names, a line of
# scheduler counts on standard error every 2147483647 ms (24.8 days) of the
# host's uptime.
LIB_GODEBUG=schedtrace=2147483647

build_lib() {
  mkdir -p "$BUILD"
  local so godebug
  so=$(soname)
  # The go command's own defaults for this module (empty when its go line is
  # the toolchain's) come first: the last -X of a variable is the one linked.
  godebug=$("$GO" list -f '{{.DefaultGODEBUG}}' ./capi)
  godebug=${godebug:+$godebug,}$LIB_GODEBUG
  # -trimpath and -s -w: reproducible, stripped release build. The soname and
  # the version script (export only adpr_*) are passed to the external linker.
  CGO_ENABLED=1 "$GO" build -buildmode=c-shared -trimpath -tags "${ADPROUTER_BUILD_TAGS:-}" \
    -ldflags "-s -w -X=runtime.godebugDefault=$godebug -extldflags '-Wl,-soname,$so -Wl,--version-script=$ROOT/capi/exports.map'" \
    -o "$BUILD/$so" ./capi
  rm -f "$BUILD/libadprouter.so.h" # cgo's generated header; include/adprouter.h is the public one
  ln -sf "$so" "$BUILD/libadprouter.so"
}

# The Python binding's optional C packer (python/adprouter/_speedups.c), built
# into build/python/adprouter/ where the binding looks for it in a source tree.
# Optional: without a C compiler or Python headers the binding runs its
# pure-Python path, with identical results.
build_speedups() {
  local py=${PYTHON:-python3} out=$BUILD/python/adprouter suffix includes
  suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null) || return 0
  includes=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null) || return 0
  mkdir -p "$out"
  if ! ${CC:-cc} -O2 -shared -fPIC -I"$includes" -I"$ROOT/include" -o "$out/_speedups$suffix" python/adprouter/_speedups.c 2>"$out/build.log"; then
    echo "note: adprouter._speedups not built (see $out/build.log); the binding uses pure Python" >&2
  fi
}

# build_examples: the example programs the docs run, into $BUILD.
build_examples() {
  mkdir -p "$BUILD"
  "$CXX" -std=c++17 -O2 -Wall -Wextra -I"$ROOT/include" -o "$BUILD/quickstart" examples/cpp/quickstart.cpp \
    -L"$BUILD" -ladprouter -Wl,-rpath,"$BUILD"
  "$CXX" -std=c++17 -O2 -Wall -Wextra -I"$ROOT/include" -o "$BUILD/nvml_budget" examples/cpp/nvml_budget.cpp -ldl
}

# usage prints the comment at the top of this file.
usage() {
  sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$ROOT/build.sh" | sed '/^set -euo/,$d'
}

# stage NAME CMD...: runs one stage of the test command, saying what it is
# and how long it took.
stage() {
  local name=$1 start=$SECONDS
  shift
  echo "== $name"
  "$@"
  echo "   ($name: $((SECONDS - start)) s)"
}

check_gofmt() {
  local unformatted
  unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
  if [ -n "$unformatted" ]; then
    echo "gofmt needed on: $unformatted" >&2
    return 1
  fi
}

# version prints ADPR_VERSION of include/adprouter.h, the one home of the
# release version.
version() {
  sed -n 's/^#define ADPR_VERSION "\(.*\)"$/\1/p' "$ROOT/include/adprouter.h"
}

# install_to PREFIX: the library with its soname link and development link,
# both headers, and the pkg-config and CMake files, which find everything
# relative to themselves, so the tree can be moved or packaged as is.
install_to() {
  local prefix=$1 v
  v=$(version)
  [ -n "$v" ] || { echo "no ADPR_VERSION in include/adprouter.h" >&2; exit 1; }
  install -d "$prefix/lib/pkgconfig" "$prefix/lib/cmake/adprouter" "$prefix/include"
  install -m 0755 "$BUILD/$(soname)" "$prefix/lib/$(soname)"
  ln -sfn "$(soname)" "$prefix/lib/libadprouter.so"
  install -m 0644 include/adprouter.h include/adprouter.hpp "$prefix/include/"
  sed "s/@VERSION@/$v/g" packaging/adprouter.pc.in >"$prefix/lib/pkgconfig/adprouter.pc"
  sed "s/@VERSION@/$v/g; s/@SONAME@/$(soname)/g" packaging/adprouterConfig.cmake.in \
    >"$prefix/lib/cmake/adprouter/adprouterConfig.cmake"
  sed "s/@VERSION@/$v/g" packaging/adprouterConfigVersion.cmake.in \
    >"$prefix/lib/cmake/adprouter/adprouterConfigVersion.cmake"
}

# backend HOOK: runs a PEP 517 hook of python/build_backend (the same code
# pip runs) writing into build/dist/, and prints the file it wrote.
backend() {
  mkdir -p "$ROOT/build/dist"
  PYTHONPATH="$ROOT/python/build_backend" "$PYTHON" -c \
    'import sys, adprouter_build as b; print(sys.argv[2] + "/" + getattr(b, sys.argv[1])(sys.argv[2]))' \
    "$1" "$ROOT/build/dist"
}

cmd=${1:-demo}
case "$cmd" in
  build)
    build_lib
    build_speedups
    build_examples
    echo "library: $BUILD/libadprouter.so (soname $(soname))"
    echo "header:  $ROOT/include/adprouter.h (C), $ROOT/include/adprouter.hpp (C++)"
    echo "python:  PYTHONPATH=$ROOT/python python3 -c 'import adprouter'"
    echo "examples: $BUILD/quickstart, $BUILD/nvml_budget"
    ;;
  library)
    build_lib
    ;;
  demo | run)
    build_lib
    build_speedups
    build_examples
    echo "== C++ quickstart (examples/cpp/quickstart.cpp) =="
    "$BUILD/quickstart"
    echo
    echo "== Python quickstart (examples/python/quickstart.py) =="
    PYTHONPATH="$ROOT/python" python3 examples/python/quickstart.py
    echo
    echo "Next: ./build.sh test runs every suite; README.md links the guides."
    ;;
  test)
    start=$SECONDS
    stage "gofmt" check_gofmt
    stage "go vet ./..." "$GO" vet ./...
    # The runner of the docs' figure commands builds only with its tag.
    stage "go vet -tags figures ./cmd/adprouter-sim" "$GO" vet -tags figures ./cmd/adprouter-sim
    echo "== go test ./... (one line per package as it finishes; the root package builds the library and"
    echo "   runs the C, C++, Python, MPI, install and documentation suites, each named when it passes)"
    # The root package runs every external suite (C, C++, Python, MPI,
    # install) in one test binary: about 4 minutes on an idle two-core
    # machine, past go test's default 10-minute limit when the machine is
    # busy. The limit is raised so that a slow machine is slow, not red.
    "$GO" test -count=1 -timeout 30m -json ./... | "$GO" run ./internal/testsummary
    # The router's tests again with its incremental state (the KV loop's
    # eligible set, running sum and lowest-load set, the default policy's
    # heap, the ttft score's queues) rechecked after every change.
    stage "go test -tags invariants ./router/..." "$GO" test -count=1 -tags invariants ./router/...
    echo "== all passed in $((SECONDS - start)) s"
    ;;
  help | -h | --help)
    usage
    ;;
  bench)
    build_lib
    build_speedups
    mkdir -p "$BUILD/bench"
    out=$BUILD/bench
    go_cmd="$GO test ./router/... -run ^\$ -bench . -benchtime 1000x"
    c_cmd="build/harness build/libadprouter.so --bench 1000"
    py_cmd="PYTHONPATH=python python3 python/bench_route.py --cpu-time"
    sim_cmd="$GO run ./cmd/adprouter-sim -workload all -policies all -timing"
    echo "== Go: $go_cmd"
    $GO test ./router/... -run '^$' -bench . -benchtime 1000x | tee "$out/go.txt"
    echo
    echo "== C: $c_cmd"
    "$CXX" -std=c++17 -O2 -Iinclude -o "$BUILD/harness" capi/testdata/harness.cpp -ldl -lpthread
    "$BUILD/harness" "$BUILD/libadprouter.so" --bench 1000 | tee "$out/c.txt"
    "$BUILD/harness" "$BUILD/libadprouter.so" --idle 200 | tee "$out/c_idle.txt"
    echo
    echo "== Python: $py_cmd"
    PYTHONPATH=python python3 python/bench_route.py --cpu-time | tee "$out/python.txt"
    echo
    echo "== Simulator: $sim_cmd"
    $GO run ./cmd/adprouter-sim -workload all -policies all -timing -json "$out/sim.json" | tee "$out/sim.txt"
    echo
    echo "== Summary: one 256-request x 16-rank kv_cache_aware decision, prompts 2048 +-10% tokens (median)"
    printf '%-28s %14s  %s\n' "path" "time" "command"
    awk '/BenchmarkRoute\/kv_cache_aware\/no_matches\/256req_x_16ranks/ {printf "%-28s %11.1f us  %s\n", "Go router (no matches)", $3/1000, cmd}' cmd="$go_cmd" "$out/go.txt"
    awk '/BenchmarkRoute\/kv_cache_aware\/matches\/256req_x_16ranks/ {printf "%-28s %11.1f us  %s\n", "Go router (matches)", $3/1000, cmd}' cmd="$go_cmd" "$out/go.txt"
    awk '$1 == 256 && $2 == 16 && $3 == "no" {printf "%-28s %11.1f us  %s\n", "C ABI call (no matches)", $4/1000, cmd}' cmd="$c_cmd" "$out/c.txt"
    awk '$1 == "kv_cache_aware" && $2 == 256 && $3 == 16 {printf "%-28s %11.1f us  %s\n%-28s %11.1f us  %s\n", "Python binding end to end", $4, cmd, "pure-Python reference", $9, cmd}' cmd="$py_cmd" "$out/python.txt"
    awk '$1 == "kv_cache_aware" && $2 == "+match" && $3 == 256 && $4 == 16 {printf "%-28s %11.1f us  %s\n%-28s %11.1f us  %s\n", "Python, dense match dicts", $5, cmd, "pure-Python reference", $10, cmd}' cmd="$py_cmd" "$out/python.txt"
    echo "(per-workload routing quality and routing time per decision: $out/sim.txt, $out/sim.json)"
    ;;
  soak)
    build_lib
    cc=${CC:-gcc}
    "$cc" -std=c11 -D_DEFAULT_SOURCE -O2 -Wall -Wextra -Werror -Iinclude -o "$BUILD/faults" capi/testdata/faults.c -ldl
    "$BUILD/faults" "$BUILD/libadprouter.so" soak "${2:-200000}"
    ;;
  install)
    if [ $# -ne 2 ]; then
      echo "usage: $0 install PREFIX" >&2
      exit 2
    fi
    prefix=$2
    case "$prefix" in /*) ;; *) prefix=$CALLER_PWD/$prefix ;; esac
    build_lib
    install_to "$prefix"
    echo "installed adprouter $(version) under $prefix"
    echo "  pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs adprouter"
    echo "  CMake:      cmake -DCMAKE_PREFIX_PATH=$prefix ...   (find_package(adprouter))"
    ;;
  wheel)
    backend build_wheel
    ;;
  sdist)
    backend build_sdist
    ;;
  version)
    version
    ;;
  *)
    echo "build.sh: unknown command \"$cmd\"; ./build.sh help lists the commands" >&2
    exit 2
    ;;
esac
