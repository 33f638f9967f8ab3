// Package datadriven reads data-driven test files in the style of the
// datadriven tests of etcd raft and Pebble: directives made of a command line,
// input lines, a "----" separator and the expected output, separated by blank
// lines. The format of the routing fixtures that use it is described in
// testdata/routing/README.md at the root of the repository.
package datadriven

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Arg is one argument of a command line: key=value, or a bare key.
type Arg struct {
	Key, Value string
	HasValue   bool
}

// Directive is one command with its input and expected output.
type Directive struct {
	Pos   string // file:line of the command line
	Cmd   string
	Args  []Arg
	Input []string
	// Want is the expected output: its lines joined by "\n", no trailing
	// newline; "" when empty.
	Want string
}

// ParseArgs splits fields (already separated by spaces) into arguments.
func ParseArgs(fields []string) []Arg {
	args := make([]Arg, 0, len(fields))
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		args = append(args, Arg{Key: k, Value: v, HasValue: ok})
	}
	return args
}

// ParseFile reads the directives of the file at path.
func ParseFile(path string) ([]Directive, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, string(data))
}

// Parse reads the directives of text; name is used in positions and errors.
func Parse(name, text string) ([]Directive, error) {
	var out []Directive
	sc := bufio.NewScanner(strings.NewReader(text))
	line := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		line++
		return strings.TrimRight(sc.Text(), " \t\r"), true
	}
	for {
		s, ok := next()
		if !ok {
			break
		}
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		fields := strings.Fields(s)
		d := Directive{Pos: fmt.Sprintf("%s:%d", name, line), Cmd: fields[0], Args: ParseArgs(fields[1:])}
		sep := false
		for {
			s, ok = next()
			if !ok || s == "" {
				break
			}
			if s == "----" {
				sep = true
				break
			}
			d.Input = append(d.Input, s)
		}
		if !sep {
			return nil, fmt.Errorf(`%s: %q has no "----" line before a blank line or the end of the file`, d.Pos, d.Cmd)
		}
		var want []string
		for {
			s, ok = next()
			if !ok || s == "" {
				break
			}
			want = append(want, s)
		}
		d.Want = strings.Join(want, "\n")
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
