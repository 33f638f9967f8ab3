//go:build unix

package router

import "syscall"

// processCPUNanos returns the CPU time (user + system) this process has used.
// Benchmarks report it per operation as cpu-ns/op: on a shared, loaded
// machine wall-clock ns/op includes time spent waiting for a core, while a
// single-goroutine, allocation-free decision's CPU time does not.
func processCPUNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
