package prefix

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the platforms the
// library runs on (x86-64 and arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// adviseHuge asks the kernel to back the n bytes at p with transparent huge
// pages (madvise MADV_HUGEPAGE on the whole huge pages inside them), for
// arrays of at least 2 huge pages. The index writes a grown array's whole
// capacity at once, and with the common "madvise" setting of
// /sys/kernel/mm/transparent_hugepage/enabled every 4 KiB of it would
// otherwise fault separately: the growth that writes a few hundred MiB took
// up to four times as long (BenchmarkGrowthToBound, docs/performance.md).
// It is a hint: a kernel without huge pages refuses it, and nothing else
// changes.
func adviseHuge(p unsafe.Pointer, n int) {
	if n < 2*hugePage {
		return
	}
	base := uintptr(p)
	lo := int((base+hugePage-1)&^(hugePage-1) - base)
	hi := int((base+uintptr(n))&^(hugePage-1) - base)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(unsafe.Slice((*byte)(p), n)[lo:hi], syscall.MADV_HUGEPAGE)
}
