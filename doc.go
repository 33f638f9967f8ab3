// Package adprouter is the root of adprouter's module: it holds no code,
// only this map of the folders and the end-to-end tests of the shipped
// library. adprouter decides, every iteration of an attention-data-parallel
// LLM engine, which rank takes each new request; it ships as a C shared
// library (libadprouter.so) with a Python binding.
//
// What each folder may touch:
//
//	router/            the routing core: policies, configuration (ParseOptions),
//	                   validation, the Python-compatible shuffle, stats. Pure Go:
//	                   no cgo, no I/O, no clocks; a deterministic state machine.
//	router/internal/   its private parts: the prefix index (prefix), the
//	                   conversation map (convmap), the recency lists (lru),
//	                   the fixture reader (datadriven) and the generator of
//	                   the AVX2 seeding assembly (seedgen, go generate).
//	kvsize/            KV-cache arithmetic with no driver: bytes per token,
//	                   start-up budgets, the run-time guard.
//	nvml/              GPU memory through go-nvml (and its forwarding stubs),
//	                   device selectors, the rate-limited monitor. nvml/nvmltest
//	                   holds every NVML fake of the tests: an in-memory
//	                   nvml.Library and the fake libnvidia-ml.so.1 (C source
//	                   embedded, with the Go recipe that builds it).
//	capi/              the C ABI (package main, built with -buildmode=c-shared):
//	                   abi.c defines the adpr_* functions of include/adprouter.h;
//	                   the Go exports behind them check arguments, convert,
//	                   and recover panics. No routing logic. Its testdata holds
//	                   the C/C++ tests of the ABI (harness, faults, wrapper).
//	include/           the public C header and the C++17 wrapper.
//	python/adprouter/  the ctypes binding in small private modules (_abi holds
//	                   every ABI layout and signature; __init__.py only
//	                   re-exports), its optional C speedups and the
//	                   TensorRT-LLM drop-in; python/tests/ holds the
//	                   pure-Python reference rules.
//	cmd/adprouter-sim/ the deterministic ADP engine simulator.
//	examples/          programs a user would write: quickstarts, MPI, NVML.
//	internal/          packages shared across the module but not its API.
//	docs/ROUTING.md    the routing contract; testdata/routing/ holds its
//	                   executable fixtures, read by the Go, C++ and Python tests.
//	packaging/, pyproject.toml, python/build_backend/
//	                   installation: pkg-config, CMake, the wheel and sdist.
//
// Data flows one way: host -> capi -> router (+ nvml and kvsize for the local
// budget) -> back to the host as plain arrays. router imports none of the
// others. build.sh is the one build recipe; ./build.sh test runs what CI runs.
package adprouter
