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
		{Pos: "f.txt:2", Cmd: "new", Args: []Arg{{"policy", "default", true}, {"flag", "", false}}},
		{Pos: "f.txt:5", Cmd: "route", Args: []Arg{{"maxn", "2", true}}, Input: []string{"states 1/0 0/0", "7 n=3"},
			Want: "assignment [] [7]\nexpected 2\n# not a comment: part of the output"},
		{Pos: "f.txt:13", Cmd: "stats", Args: []Arg{}, Want: "x 1"},
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
