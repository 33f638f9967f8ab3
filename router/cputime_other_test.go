//go:build !unix

package router

func processCPUNanos() int64 { return -1 }
