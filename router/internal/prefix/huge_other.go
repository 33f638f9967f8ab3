//go:build !linux

package prefix

import "unsafe"

// adviseHuge is a no-op where the library knows no huge-page hint.
func adviseHuge(p unsafe.Pointer, n int) {}
