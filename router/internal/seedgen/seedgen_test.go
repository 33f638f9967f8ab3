package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The checked-in assembly is what the generator writes.
func TestGeneratedUpToDate(t *testing.T) {
	got, err := os.ReadFile(filepath.Join("..", "..", "pyrandom_seed_amd64.s"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Generate()) {
		t.Fatal("router/pyrandom_seed_amd64.s is stale; run: go generate ./router")
	}
}

// Every seeder the Go side declares is generated, each once, and the widths
// are powers of two (the output loop counts cells with a shift).
func TestSeederWidths(t *testing.T) {
	src := Generate()
	for _, g := range seederGroups {
		if g&(g-1) != 0 || g > 8 {
			t.Errorf("%d vectors: want a power of two up to 8 (Y0..Y7 hold the chains)", g)
		}
	}
	for _, name := range []string{"·mtSeed16AVX2(SB)", "·mtSeed32AVX2(SB)", "·mtSeed64AVX2(SB)"} {
		if n := bytes.Count(src, []byte("TEXT "+name)); n != 1 {
			t.Errorf("TEXT %s appears %d times, want 1", name, n)
		}
	}
}
