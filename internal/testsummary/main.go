// Command testsummary reads `go test -json` on stdin and talks while the
// tests run: one line per package as it finishes (its result and time), one
// per top-level test that took 5 s or more, the output of every failed test, and a closing summary that lists the
// skipped tests with the reason each gave. ./build.sh test pipes its go test
// run through it. It exits 1 when a test or a package build failed, or when
// the stream ends without a result for a package that started.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type key struct{ pkg, test string }

// slow is how long a top-level test runs before it gets its own line.
const slow = 5.0 // seconds

type summary struct {
	out      io.Writer
	output   map[key][]string // a test's output so far
	started  map[string]bool  // packages with events and no result yet
	skips    []string
	fails    []string
	packages int
	failed   bool
}

func main() {
	s := &summary{out: os.Stdout, output: map[key][]string{}, started: map[string]bool{}}
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if !s.finish() {
		os.Exit(1)
	}
}

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not test2json output (a build error printed by go itself).
			fmt.Fprintf(s.out, "%s\n", line)
			if len(strings.TrimSpace(string(line))) > 0 {
				s.failed = true
			}
			continue
		}
		s.event(e)
	}
	return sc.Err()
}

func (s *summary) event(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "start", "run":
		s.started[e.Package] = true
	case "output", "build-output":
		s.output[k] = append(s.output[k], e.Output)
	case "skip":
		if e.Test == "" {
			delete(s.started, e.Package)
			s.packages++
			fmt.Fprintf(s.out, "  %-6s %-60s (no test files)\n", "-", e.Package)
			break
		}
		s.skips = append(s.skips, fmt.Sprintf("%s %s: %s", short(e.Package), e.Test, reason(s.output[k])))
	case "fail", "build-fail":
		if e.Test != "" {
			s.fails = append(s.fails, short(e.Package)+" "+e.Test)
			fmt.Fprintf(s.out, "--- FAIL %s %s (%.1fs)\n%s", short(e.Package), e.Test, e.Elapsed,
				strings.Join(s.output[k], ""))
			break
		}
		s.failed = true
		s.packages++
		delete(s.started, e.Package)
		fmt.Fprintf(s.out, "  %-6s %-60s %s\n", "FAIL", e.Package, secs(e.Elapsed))
		if len(s.fails) == 0 || !strings.HasPrefix(s.fails[len(s.fails)-1], short(e.Package)+" ") {
			fmt.Fprint(s.out, strings.Join(s.output[k], ""))
		}
	case "pass":
		switch {
		case e.Test == "":
			s.packages++
			delete(s.started, e.Package)
			fmt.Fprintf(s.out, "  %-6s %-60s %s\n", "ok", e.Package, secs(e.Elapsed))
		case e.Elapsed >= slow && !strings.Contains(e.Test, "/"):
			// The long end-to-end suites say when each is done.
			fmt.Fprintf(s.out, "    %-4s %-58s %s\n", "ok", short(e.Package)+" "+e.Test, secs(e.Elapsed))
		}
	}
	if e.Action == "pass" || e.Action == "fail" {
		delete(s.output, k)
	}
}

// finish prints the closing summary and reports whether everything passed.
func (s *summary) finish() bool {
	if len(s.started) > 0 {
		var pkgs []string
		for p := range s.started {
			pkgs = append(pkgs, p)
		}
		sort.Strings(pkgs)
		fmt.Fprintf(s.out, "no result for %s (the run was cut short)\n", strings.Join(pkgs, ", "))
		s.failed = true
	}
	fmt.Fprintf(s.out, "%d packages", s.packages)
	if len(s.skips) > 0 {
		fmt.Fprintf(s.out, "; %d tests skipped:\n", len(s.skips))
		for _, k := range s.skips {
			fmt.Fprintf(s.out, "  skipped %s\n", k)
		}
	} else {
		fmt.Fprintln(s.out, "; nothing skipped")
	}
	if len(s.fails) > 0 {
		fmt.Fprintf(s.out, "%d tests failed: %s\n", len(s.fails), strings.Join(s.fails, ", "))
	}
	return !s.failed && len(s.fails) == 0
}

// reason is a skipped test's message: the last output line that is not the
// framework's own (=== RUN, --- SKIP).
func reason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		return l
	}
	return "(no reason given)"
}

func short(pkg string) string {
	return strings.TrimPrefix(strings.TrimPrefix(pkg, "github.com/adprouter/adprouter"), "/")
}

func secs(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}
