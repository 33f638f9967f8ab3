// Seedgen writes router/pyrandom_seed_amd64.s, the AVX2 code behind the
// router's Python-compatible tie-break that seeds MT19937 (init_by_array) for
// many seeds at once and computes their first outputs, and the Go around it:
// seeders_amd64.go (declarations, dispatch by width) and seeders_other.go
// (stubs elsewhere).
//
// The seeders differ only in how many 8-lane vectors they interleave, so
// every width is generated from one description and one table
// (router/internal/seedwidths) instead of written out once per width.
//
// Usage (from the router package directory, normally through go generate):
//
//	go run ./internal/seedgen [-dir DIR]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// Files are the files seedgen writes, relative to the router package, and
// their contents.
func Files() map[string][]byte {
	return map[string][]byte{
		"pyrandom_seed_amd64.s": Generate(),
		"seeders_amd64.go":      GenerateGo(true),
		"seeders_other.go":      GenerateGo(false),
	}
}

func main() {
	dir := flag.String("dir", ".", "the router package's directory")
	flag.Parse()
	for name, text := range Files() {
		if err := os.WriteFile(filepath.Join(*dir, name), text, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "seedgen:", err)
			os.Exit(1)
		}
	}
}
