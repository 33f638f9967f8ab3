package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/cmd/adprouter-sim/sim"
)

// Every figure in the docs names the simulator command that produced it.
// These tests keep those commands runnable: each `go run ./cmd/adprouter-sim`
// line of a ```sh block must parse and name workloads, policies, grids and
// scales that exist, so a renamed or removed flag breaks the build, not the
// reader who re-runs a figure. The commands are not run (the figures take
// minutes to hours on 2 cores).

// docCommandFiles are the documents, relative to this package, whose shell
// blocks give simulator commands (the README here, the repository's README
// and docs/).
func docCommandFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md", "README.md"}, files...)
}

// A docCommand is one simulator command of a document, at a line.
type docCommand struct {
	file string
	line int
	args []string
}

func (d docCommand) String() string { return fmt.Sprintf("%s:%d", d.file, d.line) }

// simPrefix starts every simulator command the docs give.
const simPrefix = "go run ./cmd/adprouter-sim"

// docCommands returns the simulator commands of the ```sh blocks in text,
// their arguments as bash expands them: a command may continue over lines
// ending in a backslash, end in a comment, and use the block's variable
// assignments (NAME=value lines) and $(seq ...). Only those lines reach
// bash, with go defined as a function that prints its arguments; nothing
// else in a block runs.
func docCommands(file, text string) ([]docCommand, error) {
	var out []docCommand
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		var assigns []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			start := i
			l := strings.TrimSpace(lines[i])
			for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
				i++
				l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(lines[i])
			}
			switch {
			case isAssignment(l):
				assigns = append(assigns, l)
			case strings.HasPrefix(l, simPrefix+" ") || l == simPrefix:
				args, err := shellArgs(assigns, l)
				if err != nil {
					return nil, fmt.Errorf("%s:%d: %w", file, start+1, err)
				}
				out = append(out, docCommand{file, start + 1, args})
			}
		}
	}
	return out, nil
}

// isAssignment reports whether l is a shell variable assignment alone
// (NAME=value, no command after it).
func isAssignment(l string) bool {
	name, value, ok := strings.Cut(l, "=")
	if !ok || name == "" || strings.ContainsAny(value, " \t") {
		return false
	}
	for i, c := range name {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// shellArgs expands command line l as bash would after the assignments,
// and returns the arguments after simPrefix.
func shellArgs(assigns []string, l string) ([]string, error) {
	script := "set -eu\ngo() { printf '%s\\0' \"$@\"; }\n" + strings.Join(assigns, "\n") + "\n" + l + "\n"
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", "-c", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("bash: %v: %s", err, stderr.String())
	}
	args := strings.Split(strings.TrimSuffix(stdout.String(), "\x00"), "\x00")
	if len(args) < 2 || args[0] != "run" || args[1] != "./cmd/adprouter-sim" {
		return nil, fmt.Errorf("expanded to go %q, want go run ./cmd/adprouter-sim ...", args)
	}
	return args[2:], nil
}

// gridChecked memoizes checkArgs's grid check by grid and trace scales:
// building a grid's cases takes up to a second, and the docs name a few
// grids many times.
var gridChecked = map[string]error{}

// checkArgs makes the checks run makes before it simulates anything, with
// the same functions, and those it makes later of names (policies, the
// evaluation grid and its trace scales), without reading any file the
// command names.
func checkArgs(args []string) error {
	c := newCommand(io.Discard, io.Discard)
	if err := c.fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil // run prints the help
		}
		return err
	}
	if c.fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", c.fs.Args())
	}
	c.fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	if _, err := c.engine(); err != nil {
		return err
	}
	if *c.traces == "" { // with -trace, workloadConfigs reads the files
		if _, err := c.workloadConfigs(); err != nil {
			return err
		}
	}
	if err := c.checkModes(); err != nil {
		return err
	}
	if c.set["policies"] {
		if _, err := sim.ParseVariants(*c.policies); err != nil {
			return err
		}
	}
	if *c.eval {
		scales, err := parseTraceScales(*c.evalTraceScales)
		if err != nil {
			return fmt.Errorf("-eval-trace-scales: %w", err)
		}
		key := *c.evalGrid + " " + *c.evalTraceScales
		err, ok := gridChecked[key]
		if !ok {
			_, err = sim.EvalGridScaled(*c.evalGrid, nil, scales)
			gridChecked[key] = err
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// allDocCommands returns the simulator commands of docCommandFiles, each
// named by its path from the repository root.
func allDocCommands(t *testing.T) []docCommand {
	t.Helper()
	var all []docCommand
	for _, file := range docCommandFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(file, "../../")
		if name == file {
			name = "cmd/adprouter-sim/" + file
		}
		cmds, err := docCommands(name, string(text))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, cmds...)
	}
	return all
}

func TestDocCommandsParse(t *testing.T) {
	cmds := allDocCommands(t)
	for _, d := range cmds {
		if err := checkArgs(d.args); err != nil {
			t.Errorf("%v: adprouter-sim %s: %v", d, strings.Join(d.args, " "), err)
		}
	}
	// The docs give about a hundred commands; far fewer means the extraction
	// missed them, and the test would pass on nothing.
	if len(cmds) < 30 {
		t.Errorf("found %d simulator commands in the docs, want 30 or more", len(cmds))
	}
	t.Logf("%d simulator commands checked", len(cmds))
}

func TestDocCommandsExtract(t *testing.T) {
	text := "prose `go run ./cmd/adprouter-sim -x` is not a block\n" +
		"```sh\n" +
		"T=a.jsonl,b.jsonl\n" +
		"go run ./cmd/adprouter-sim -eval -eval-grid random   # a comment\n" +
		"go run ./cmd/adprouter-sim -sweep -seeds $(seq -s, 1 3) \\\n" +
		"  -trace $T -eval-case \"case=130 \"\n" +
		"./build.sh test\n" +
		"```\n" +
		"```python\ngo run ./cmd/adprouter-sim -no\n```\n"
	got, err := docCommands("f.md", text)
	if err != nil {
		t.Fatal(err)
	}
	want := []docCommand{
		{"f.md", 4, []string{"-eval", "-eval-grid", "random"}},
		{"f.md", 5, []string{"-sweep", "-seeds", "1,2,3", "-trace", "a.jsonl,b.jsonl", "-eval-case", "case=130 "}},
	}
	if len(got) != len(want) {
		t.Fatalf("docCommands = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].line != want[i].line || !slices.Equal(got[i].args, want[i].args) {
			t.Errorf("command %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// checkArgs must reject what run rejects, or TestDocCommandsParse proves
// nothing.
func TestCheckArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"-eval", "-eval-grid", "random", "-eval-case", "case=130 "}, true},
		{[]string{"-sweep", "-seeds", "1,2", "-dps", "4,8", "-workload", "conversation"}, true},
		{[]string{"-trace", "missing.jsonl", "-policies", "all"}, true}, // files are not read
		{[]string{"-eval", "-eval-grid", "nope"}, false},
		{[]string{"-eval-gird", "random"}, false},
		{[]string{"-policies", "kv_cache_aware,nope"}, false},
		{[]string{"-workload", "nope"}, false},
		{[]string{"-eval", "-eval-trace-scales", "2"}, false},
		{[]string{"-eval", "-eval-trace-scales", "0:1"}, false},
		{[]string{"-eval", "-eval-grid", "mixed", "-eval-trace-scales", "1:1"}, false},
		{[]string{"-seeds", "1,2"}, false},
		{[]string{"-dp", "four"}, false},
		{[]string{"-eval", "extra"}, false},
		{[]string{"-help"}, true},
	} {
		err := checkArgs(tc.args)
		if (err == nil) != tc.ok {
			t.Errorf("checkArgs(%q) = %v, want ok %v", tc.args, err, tc.ok)
		}
		// What checkArgs rejects, run rejects too, before it simulates.
		if tc.ok {
			continue
		}
		if code, _, _ := runCmd(t, tc.args...); code == 0 {
			t.Errorf("run(%q) succeeds, checkArgs rejects it", tc.args)
		}
	}
}
