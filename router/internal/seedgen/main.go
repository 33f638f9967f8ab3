// Seedgen writes router/pyrandom_seed_amd64.s, the AVX2 code behind the
// router's Python-compatible tie-break that seeds MT19937 (init_by_array) for
// 16, 32, 64 or 96 seeds at once and computes their first outputs.
//
// The seeders differ only in how many 8-lane vectors they interleave, so
// their bodies are generated from one description instead of written out
// once per width.
//
// Usage (from the router package directory, normally through go generate):
//
//	go run ./internal/seedgen [-o FILE]
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	out := flag.String("o", "pyrandom_seed_amd64.s", "output file")
	flag.Parse()
	if err := os.WriteFile(*out, Generate(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "seedgen:", err)
		os.Exit(1)
	}
}
