//go:build !amd64 || purego

package router

// seedSIMD is false where there is no vector seeder: mtSeedLanes always
// runs the portable code.
var seedSIMD = false

func mtSeed16AVX2(st, add, out *uint32, nout int) {
	panic("router: mtSeed16AVX2 called without AVX2")
}

func mtSeed32AVX2(st, add, out *uint32, nout int) {
	panic("router: mtSeed32AVX2 called without AVX2")
}

func mtSeed64AVX2(st, add, out *uint32, nout int) {
	panic("router: mtSeed64AVX2 called without AVX2")
}

func mtSeed96AVX2(st, add, out *uint32, nout int) {
	panic("router: mtSeed96AVX2 called without AVX2")
}

func mtAcceptAVX2(out, masks *uint32, width, nout, m int) {
	panic("router: mtAcceptAVX2 called without AVX2")
}
