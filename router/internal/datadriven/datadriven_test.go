package datadriven

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	text := `# comment
new policy=default flag
----

route maxn=2
states 1/0 0/0
7 n=3
----
assignment [] [7]
expected 2
# not a comment: part of the output

stats
----
x 1`
	got, err := Parse("f.txt", text)
	if err != nil {
		t.Fatal(err)
	}
	want := []Directive{
		{Pos: "f.txt:2", Cmd: "new", Args: []Arg{{"policy", "default", true}, {"flag", "", false}}, WantFrom: 3, WantTo: 3},
		{Pos: "f.txt:5", Cmd: "route", Args: []Arg{{"maxn", "2", true}}, Input: []string{"states 1/0 0/0", "7 n=3"},
			Want: "assignment [] [7]\nexpected 2\n# not a comment: part of the output", WantFrom: 8, WantTo: 11},
		{Pos: "f.txt:13", Cmd: "stats", Args: []Arg{}, Want: "x 1", WantFrom: 14, WantTo: 15},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse =\n%#v\nwant\n%#v", got, want)
	}
}

func TestParseMissingSeparator(t *testing.T) {
	for _, text := range []string{"route\n7 n=3\n\nstats\n----\n", "route\n7 n=3"} {
		_, err := Parse("f.txt", text)
		if err == nil || !strings.Contains(err.Error(), `f.txt:1: "route" has no "----"`) {
			t.Errorf("Parse(%q) error = %v, want one naming f.txt:1", text, err)
		}
	}
}

func TestRewrite(t *testing.T) {
	text := `# comment: kept
new policy=default
----

# another
route maxn=2
7 n=3
----
old line 1
old line 2

stats
----

shuffle n=3
----
1 2 0`
	ds, err := Parse("f.txt", text)
	if err != nil {
		t.Fatal(err)
	}
	for _, final := range []string{"", "\n"} {
		got, err := Rewrite(text+final, ds, []string{"", "new line", "a\n  b", "0 1 2\nmore"})
		if err != nil {
			t.Fatal(err)
		}
		want := `# comment: kept
new policy=default
----

# another
route maxn=2
7 n=3
----
new line

stats
----
a
  b

shuffle n=3
----
0 1 2
more` + final
		if got != want {
			t.Errorf("Rewrite (final %q) =\n%s\nwant\n%s", final, got, want)
		}
		// The rewritten text parses back to the new outputs, the same directives.
		again, err := Parse("f.txt", got)
		if err != nil || len(again) != len(ds) || again[1].Want != "new line" || again[2].Want != "a\n  b" || again[2].Cmd != "stats" {
			t.Errorf("Parse(rewritten) = %+v, %v", again, err)
		}
	}
	// Unchanged outputs give the text back.
	outs := make([]string, len(ds))
	for i, d := range ds {
		outs[i] = d.Want
	}
	if got, err := Rewrite(text, ds, outs); err != nil || got != text {
		t.Errorf("Rewrite with the same outputs = %q, %v; want the text unchanged", got, err)
	}
	for _, bad := range []string{"a\n\nb", "trailing ", " "} {
		if _, err := Rewrite(text, ds, []string{"", bad, "", ""}); err == nil || !strings.Contains(err.Error(), "f.txt:6") {
			t.Errorf("Rewrite with output %q: error %v, want one naming f.txt:6", bad, err)
		}
	}
}
