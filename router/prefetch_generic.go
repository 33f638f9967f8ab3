//go:build !amd64 || purego

package router

// prefetchPrefix is a no-op where the router has no prefetch instruction
// wired up; see prefetch_amd64.go.
func prefetchPrefix(p *int32) {}
