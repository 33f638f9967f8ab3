//go:build cgo

package nvml

// This file makes package nvml a cgo package on linux/amd64, so that the go
// command assembles zz_stubs_linux_amd64.S and compiles
// resolve_linux_amd64.c into it; see the package documentation, "NVML inside
// a shared library". dlopen and dlsym live in libdl on older glibc.

// #cgo LDFLAGS: -ldl
import "C"

// stubsBuilt reports whether this build carries the nvml* forwarding stubs.
const stubsBuilt = true
