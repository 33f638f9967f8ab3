#!/usr/bin/env bash
# adprouter's one entry point.
#
#   ./build.sh          build build/libadprouter.so (release) and print where it is
#   ./build.sh run      build, then run the C++ and Python quickstarts
#   ./build.sh test     everything CI checks: gofmt, go vet, go test ./...,
#                       the C++ harness and the Python tests (via router_test.go)
#   ./build.sh bench    Go, C and Python benchmarks and a simulator sweep
#
# Environment: GO (default: go on PATH, else /usr/local/go/bin/go), CXX (g++).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
BUILD=$ROOT/build
if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi
export GO
CXX=${CXX:-g++}
# go-nvml's cgo code calls NVML functions the header marks deprecated; the
# warnings are noise for us.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"

build_lib() {
  mkdir -p "$BUILD"
  # -trimpath and -s -w: reproducible, stripped release build. The soname and
  # the version script (export only adpr_*) are passed to the external linker.
  CGO_ENABLED=1 "$GO" build -buildmode=c-shared -trimpath \
    -ldflags "-s -w -extldflags '-Wl,-soname,libadprouter.so.1 -Wl,--version-script=$ROOT/capi/exports.map'" \
    -o "$BUILD/libadprouter.so.1" ./capi
  rm -f "$BUILD/libadprouter.so.h" # cgo's generated header; include/adprouter.h is the public one
  ln -sf libadprouter.so.1 "$BUILD/libadprouter.so"
}

build_examples() {
  mkdir -p "$BUILD"
  "$CXX" -std=c++17 -O2 -Wall -Wextra -I"$ROOT/include" -o "$BUILD/quickstart" examples/cpp/quickstart.cpp -ldl
}

cmd=${1:-build}
case "$cmd" in
  build)
    build_lib
    echo "library: $BUILD/libadprouter.so (soname libadprouter.so.1)"
    echo "header:  $ROOT/include/adprouter.h"
    echo "python:  PYTHONPATH=$ROOT/python python3 -c 'import adprouter'"
    ;;
  run)
    build_lib
    build_examples
    echo "== C++ quickstart (examples/cpp/quickstart.cpp) =="
    "$BUILD/quickstart" "$BUILD/libadprouter.so"
    echo
    echo "== Python quickstart (examples/python/quickstart.py) =="
    PYTHONPATH="$ROOT/python" python3 examples/python/quickstart.py
    ;;
  test)
    unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
    if [ -n "$unformatted" ]; then
      echo "gofmt needed on: $unformatted" >&2
      exit 1
    fi
    "$GO" vet ./...
    # router_test.go (the root package) builds the library and runs the C++
    # harness and the Python tests against it.
    "$GO" test -count=1 ./...
    ;;
  bench)
    exec "$ROOT/.ci/bench.sh"
    ;;
  *)
    echo "usage: $0 [build|run|test|bench]" >&2
    exit 2
    ;;
esac
