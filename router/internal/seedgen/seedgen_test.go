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

// Every seeder the Go side declares is generated, each once, and no seeder
// needs more chains than there are YMM registers beside the four its steps
// use (multiplier, base or index, scratch, the constant one).
func TestSeederWidths(t *testing.T) {
	src := Generate()
	for _, g := range seederGroups {
		if g < 1 || g > 12 {
			t.Errorf("%d vectors: want 1 to 12 (Y0..Y11 hold the chains)", g)
		}
	}
	for _, name := range []string{"·mtSeed16AVX2(SB)", "·mtSeed32AVX2(SB)", "·mtSeed64AVX2(SB)", "·mtSeed96AVX2(SB)"} {
		if n := bytes.Count(src, []byte("TEXT "+name)); n != 1 {
			t.Errorf("TEXT %s appears %d times, want 1", name, n)
		}
	}
}
