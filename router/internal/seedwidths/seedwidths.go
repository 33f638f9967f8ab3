// Package seedwidths is the one table of the router's vector seeders (the
// AVX2 code that seeds CPython's random.Random(id) for many requests at
// once): how many 8-lane vectors each one interleaves. router/internal/seedgen
// generates from it the assembly of every seeder and the Go around them (the
// declarations, the dispatch by width and the stubs of other platforms), and
// the router's seed cache chooses among its widths.
package seedwidths

// Vectors lists the seeders, narrowest first: seeder i seeds 8*Vectors[i]
// generators at once. Up to four vectors a run costs what the ~7-cycle chain
// of one step costs (two, for sparse ties, about what one scalar seed does);
// eight nearly saturate the vector units, and twelve (all the YMM registers
// the steps leave free) keep them busier still: 69 ns a seed against 77 on
// this project's Zen 4, and on CPUs whose vector multiply takes 10 cycles
// eight chains would not even cover its latency.
var Vectors = []int{2, 4, 8, 12}

// Lanes are the generators seeded by one 8-lane vector.
const Lanes = 8

// Widths returns the seeders' widths (generators seeded at once), narrowest
// first.
func Widths() []int {
	w := make([]int, len(Vectors))
	for i, v := range Vectors {
		w[i] = Lanes * v
	}
	return w
}
