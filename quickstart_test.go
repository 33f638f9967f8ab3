// The quickstarts (examples/cpp/quickstart.cpp, examples/python/quickstart.py)
// are what a user reads first: they must build, run, print the same
// receipts, and those receipts must tell the story their comments tell.
package adprouter_test

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestQuickstarts(t *testing.T) {
	lib := library(t)
	cxx := need(t, "g++")
	py := need(t, "python3")
	bin := filepath.Join(t.TempDir(), "quickstart")
	dir := filepath.Dir(lib)
	run(t, nil, cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-Iinclude", "-o", bin,
		"examples/cpp/quickstart.cpp", "-L"+dir, "-ladprouter", "-Wl,-rpath,"+dir)
	cpp := run(t, nil, bin)
	python := run(t, []string{"PYTHONPATH=python", "ADPROUTER_LIBRARY=" + lib}, py, "examples/python/quickstart.py")

	// C++ prints the versions first; the rest is the same receipts.
	first, body, _ := strings.Cut(cpp, "\n")
	if !strings.HasPrefix(first, "adprouter ") {
		t.Errorf("C++ quickstart's first line %q, want the versions", first)
	}
	if body != python {
		t.Errorf("the quickstarts print different receipts:\nC++:\n%s\nPython:\n%s", body, python)
	}
	for _, want := range []string{
		// Iteration 1: nothing cached, warmup reaches every rank once.
		"iteration 1\nrequest 1 (600 tokens) -> rank 0: cold-start warmup\n" +
			"request 2 (640 tokens) -> rank 1: cold-start warmup\n" +
			"request 3 (812 tokens) -> rank 2: cold-start warmup\n" +
			"request 4 (700 tokens) -> rank 3: cold-start warmup\n",
		"request 5 (580 tokens) -> rank 1: scored; soft cap 3, 4 eligible; cache affinity off",
		// Iteration 2: cached system prompts pull requests, ties go to the shuffle.
		"request 9 (662 tokens) -> rank 3: scored; soft cap 3, 4 eligible; cache affinity on (best match 512/662",
		"2 ranks tied; random.Random(11).shuffle gave [0 2 1]: first tied is rank 0",
		// Prompt B's only holder is full: affinity is off and load decides.
		"request 8 (552 tokens) -> rank 1: scored; soft cap 3, 1 eligible; cache affinity off",
		"     2     3        1102  (at cap)",
	} {
		if !strings.Contains(python, want) {
			t.Errorf("the quickstart does not print %q:\n%s", want, python)
		}
	}
}
