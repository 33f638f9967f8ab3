//go:build !(linux && amd64 && cgo)

package nvml

// stubsBuilt reports whether this build carries the nvml* forwarding stubs.
// There are none on this platform: go-nvml leaves its nvml* symbols
// undefined, as upstream.
const stubsBuilt = false
