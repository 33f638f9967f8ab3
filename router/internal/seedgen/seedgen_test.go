package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/adprouter/adprouter/router/internal/seedwidths"
)

// The checked-in files are what the generator writes.
func TestGeneratedUpToDate(t *testing.T) {
	for name, want := range Files() {
		got, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("router/%s is stale; run: go generate ./router", name)
		}
	}
}

// Every seeder of the table is generated and dispatched, each once, and no
// seeder needs more chains than there are YMM registers beside the four its
// steps use (multiplier, base or index, scratch, the constant one).
func TestSeederWidths(t *testing.T) {
	asm, dispatch := Generate(), GenerateGo(true)
	for i, g := range seedwidths.Vectors {
		if g < 1 || g > 12 {
			t.Errorf("%d vectors: want 1 to 12 (Y0..Y11 hold the chains)", g)
		}
		if i > 0 && g <= seedwidths.Vectors[i-1] {
			t.Errorf("seedwidths.Vectors %v: want narrowest first, each once", seedwidths.Vectors)
		}
		w := strconv.Itoa(seedwidths.Widths()[i])
		if n := bytes.Count(asm, []byte("TEXT \u00b7mtSeed"+w+"AVX2(SB)")); n != 1 {
			t.Errorf("mtSeed%sAVX2 appears %d times in the assembly, want 1", w, n)
		}
		if n := bytes.Count(dispatch, []byte("case "+w+":")); n != 1 {
			t.Errorf("width %s dispatched %d times, want 1", w, n)
		}
	}
}
