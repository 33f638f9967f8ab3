//go:build !amd64 || purego

package router

// seedSIMD is false where there is no vector seeder: mtSeedLanes always
// runs the portable code.
var seedSIMD = false

func mtSeedLanesAVX2(st *[mtN][mtLanes]uint32, add *[2][mtLanes]uint32, out *uint32, nout int) {
	panic("router: mtSeedLanesAVX2 called without AVX2")
}
