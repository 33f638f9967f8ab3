//go:build amd64 && !purego

package router

//go:generate go run ./internal/seedgen -dir .

// seedSIMD says whether the seed cache runs the AVX2 seeders (mtSeedAVX2). Tests switch it off
// to run the portable path on the same machine.
var seedSIMD = hasAVX2()

// mtAcceptAVX2 marks, for width (a multiple of 32) lane-interleaved streams of nout
// <= 64 outputs laid out as the seeders write them, the draws that
// random.shuffle of m < 2^24 items accepts: bit t of lane l's mask (low word
// at masks[l], high word at masks[width+l]) is set when draw t is below n in
// its top bit_length(n) bits, n counting down from m. See
// mtStream.shuffleAccepted.
//
//go:noescape
func mtAcceptAVX2(out, masks *uint32, width, nout, m int)

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

func xgetbv0() (eax uint32)

// hasAVX2 reports whether the CPU has AVX2 and the OS saves the YMM
// registers across context switches.
func hasAVX2() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if ecx1&osxsave == 0 || ecx1&avx == 0 {
		return false
	}
	if xgetbv0()&6 != 6 { // XMM and YMM state enabled
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
}
