// Package datadriven reads data-driven test files in the style of the
// datadriven tests of etcd raft and Pebble: directives made of a command line,
// input lines, a "----" separator and the expected output, separated by blank
// lines. The format of the routing fixtures that use it is described in
// testdata/routing/README.md at the root of the repository.
//
// Rewrite puts new expected outputs into a file's text and leaves everything
// else (directives, input, comments, blank lines) as it was: the rewrite mode
// of the fixture tests.
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
	// WantFrom and WantTo locate the expected output in the text: its lines
	// are the text's lines [WantFrom, WantTo), counted from 0 (WantFrom is
	// the line after "----"; WantFrom == WantTo when the output is empty).
	WantFrom, WantTo int
}

// Get returns the value of the argument key and whether it is there.
func (d *Directive) Get(key string) (string, bool) {
	for _, a := range d.Args {
		if a.Key == key {
			return a.Value, true
		}
	}
	return "", false
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
		d.WantFrom = line // the 0-based index of the line after "----"
		var want []string
		for {
			s, ok = next()
			if !ok || s == "" {
				break
			}
			want = append(want, s)
		}
		d.WantTo = d.WantFrom + len(want)
		d.Want = strings.Join(want, "\n")
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// Rewrite returns text, whose directives Parse returned as ds, with the
// expected output of ds[i] replaced by outs[i]; every other line is kept as
// it is. An output that the format cannot hold (a blank line, which would
// end it, or trailing spaces, which the parser drops) is an error.
func Rewrite(text string, ds []Directive, outs []string) (string, error) {
	if len(outs) != len(ds) {
		return "", fmt.Errorf("%d outputs for %d directives", len(outs), len(ds))
	}
	lines := strings.Split(text, "\n")
	final := len(lines) > 0 && lines[len(lines)-1] == ""
	if final {
		lines = lines[:len(lines)-1] // text ends with a newline
	}
	var b strings.Builder
	at := 0
	for i, d := range ds {
		if d.WantFrom < at || d.WantTo < d.WantFrom || d.WantTo > len(lines) {
			return "", fmt.Errorf("%s: expected output at lines [%d, %d) is not in the text", d.Pos, d.WantFrom, d.WantTo)
		}
		for _, s := range lines[at:d.WantFrom] {
			b.WriteString(s + "\n")
		}
		if outs[i] != "" {
			for _, s := range strings.Split(outs[i], "\n") {
				if strings.TrimSpace(s) == "" || strings.TrimRight(s, " \t\r") != s {
					return "", fmt.Errorf("%s: output line %q is blank or ends in spaces: the format cannot hold it", d.Pos, s)
				}
				b.WriteString(s + "\n")
			}
		}
		at = d.WantTo
	}
	for _, s := range lines[at:] {
		b.WriteString(s + "\n")
	}
	out := b.String()
	if !final {
		out = strings.TrimSuffix(out, "\n")
	}
	return out, nil
}
