//go:build amd64 && !purego

package router

import (
	"runtime/debug"
	"syscall"
	"testing"
	"unsafe"
)

// prefetchPrefix reads 256 bytes from its pointer whatever the prompt's
// length; the prefetch instruction must not fault where those bytes run into
// a page the process may not read (a one-token prompt at the end of its
// page, as the last item of an allocation can be).
func TestPrefetchPastMappedMemory(t *testing.T) {
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	defer syscall.Munmap(mem)
	if err := syscall.Mprotect(mem[page:], syscall.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	// The setup is right: reading the next page faults (a panic here,
	// not a crash, with SetPanicOnFault).
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if !faults(func() { prefetchTestSink = *(*int32)(unsafe.Pointer(&mem[page])) }) {
		t.Fatal("the guard page is readable; the test proves nothing")
	}
	last := (*int32)(unsafe.Pointer(&mem[page-4]))
	*last = 7
	if faults(func() { prefetchPrefix(last) }) {
		t.Fatal("prefetchPrefix faulted on the unreadable page after a one-token prompt")
	}
	if *last != 7 {
		t.Fatalf("prefetch changed memory: %d", *last)
	}
}

var prefetchTestSink int32

// faults reports whether f panicked (with SetPanicOnFault, a memory fault).
func faults(f func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	f()
	return false
}
