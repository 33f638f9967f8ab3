//go:build !amd64 || purego

package router

// seedSIMD is false where there is no vector seeder: the seed cache always
// runs the portable code (seeders_other.go's mtSeedAVX2 panics).
var seedSIMD = false

func mtAcceptAVX2(out, masks *uint32, width, nout, m int) {
	panic("router: mtAcceptAVX2 called without AVX2")
}
