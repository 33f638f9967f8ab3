//go:build amd64 && !purego

package router

// seedSIMD says whether mtSeedLanes runs the AVX2 seeder. Tests switch it off
// to run the portable path on the same machine.
var seedSIMD = hasAVX2()

// mtSeedLanesAVX2 seeds mtLanes generators at once, as four 8-lane AVX2
// vectors interleaved: st[i][l] becomes word i of random.Random(seed l)'s
// state, where add[0][l], add[1][l] = seedAddends(seed l), and the nout*mtLanes
// words from out receive the first nout outputs, lane-interleaved (output t
// of lane l at t*mtLanes+l). nout <= mtFastOutputs. Only called when
// seedSIMD is true; mtSeed and mtSeed4 are the portable equivalents.
//
//go:noescape
func mtSeedLanesAVX2(st *[mtN][mtLanes]uint32, add *[2][mtLanes]uint32, out *uint32, nout int)

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
