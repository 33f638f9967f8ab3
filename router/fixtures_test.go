package router

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/router/internal/datadriven"
)

// fixtureDir holds the routing fixtures every front end runs: the worked
// examples and test vectors of docs/ROUTING.md and cases shared with the C++
// harness and the Python suites. Their format is testdata/routing/README.md.
const fixtureDir = "../testdata/routing"

// TestRoutingFixtures runs every fixture through the Router API.
func TestRoutingFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s (%v)", fixtureDir, err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			ds, err := datadriven.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var f fixtureRunner
			for _, d := range ds {
				got, err := f.run(&d)
				if err != nil {
					t.Errorf("%s: %s: %v", d.Pos, d.Cmd, err)
				} else if got != d.Want {
					t.Errorf("%s: %s: got\n%s\nwant\n%s", d.Pos, d.Cmd, got, d.Want)
				}
			}
		})
	}
}

// fixtureRunner runs the directives of one file, in order, on the router of
// the latest "new".
type fixtureRunner struct {
	r *Router
}

func (f *fixtureRunner) run(d *datadriven.Directive) (string, error) {
	switch d.Cmd {
	case "new":
		f.r = nil // a failed "new" fails the directives that follow
		if len(d.Input) > 0 {
			return "", fmt.Errorf("unexpected input %q", d.Input[0])
		}
		cfg, err := fixtureConfig(d.Args)
		if err != nil {
			return "", err
		}
		f.r, err = New(cfg)
		return "", err
	case "route":
		if f.r == nil {
			return "", fmt.Errorf(`no router: "new" must come first`)
		}
		states, reqs, maxn, matches, err := fixtureCall(d, f.r.Config().DPSize)
		if err != nil {
			return "", err
		}
		res, err := f.r.Route(states, reqs, maxn, matches)
		if err != nil {
			return "", err
		}
		if err := checkResult(f.r.Config(), states, reqs, maxn, res); err != nil {
			return "", err
		}
		return renderResult(res), nil
	case "stats":
		if f.r == nil {
			return "", fmt.Errorf(`no router: "new" must come first`)
		}
		s := f.r.Stats(0)
		return fmt.Sprintf("pending_warmup %d\nconversations %d", s.PendingWarmup, s.Conversations), noInput(d)
	case "shuffle":
		return fixtureShuffle(d)
	case "genrand":
		seed, err := uintArg(d, "seed")
		if err != nil {
			return "", err
		}
		count, err := uintArg(d, "count")
		if err != nil {
			return "", err
		}
		var r pyRandom
		r.seed(seed)
		out := make([]string, count)
		for i := range out {
			out[i] = strconv.FormatUint(uint64(r.uint32()), 10)
		}
		return strings.Join(out, " "), noInput(d, "seed", "count")
	}
	return "", fmt.Errorf("unknown command (want new, route, stats, shuffle or genrand)")
}

// fixtureShuffle checks PyShuffle against the permutation, and the tie-break
// of a routed request against its first element.
func fixtureShuffle(d *datadriven.Directive) (string, error) {
	seed, err := uintArg(d, "seed")
	if err != nil {
		return "", err
	}
	n, err := uintArg(d, "n")
	if err != nil {
		return "", err
	}
	if err := noInput(d, "seed", "n"); err != nil {
		return "", err
	}
	x := make([]int, n)
	for i := range x {
		x[i] = i
	}
	PyShuffle(seed, x)
	first, err := strconv.Atoi(strings.Fields(d.Want + " -1")[0])
	if err != nil {
		return "", fmt.Errorf("expected output %q is not a permutation", d.Want)
	}
	r, err := New(DefaultConfig(PolicyKVCacheAware, int(n)))
	if err != nil {
		return "", err
	}
	res, err := r.Route(idle(int(n)), []Request{req(seed, 10)}, 1, nil)
	if err != nil {
		return "", err
	}
	if res.Ranks[0] != first {
		return "", fmt.Errorf("a lone request with id %d on %d tied ranks went to rank %d, want %d (the first element)",
			seed, n, res.Ranks[0], first)
	}
	out := make([]string, n)
	for i, v := range x {
		out[i] = strconv.Itoa(v)
	}
	return strings.Join(out, " "), nil
}

// fixtureConfig builds a Config from "new" arguments: the C ABI's option
// keys and text, parsed by ParseOptions as the C and Python front ends do.
func fixtureConfig(args []datadriven.Arg) (Config, error) {
	kv := make([][2]string, 0, len(args))
	for _, a := range args {
		if !a.HasValue {
			return Config{}, fmt.Errorf("option %q has no value", a.Key)
		}
		kv = append(kv, [2]string{a.Key, a.Value})
	}
	return ParseOptions(kv)
}

// fixtureCall parses the arguments and input of a "route" directive.
func fixtureCall(d *datadriven.Directive, size int) (states []RankState, reqs []Request, maxn int, matches []int32, err error) {
	m, err := uintArg(d, "maxn")
	if err != nil {
		return nil, nil, 0, nil, err
	}
	if err := onlyArgs(d, "maxn"); err != nil {
		return nil, nil, 0, nil, err
	}
	states = idle(size)
	var rows [][]int32 // per request: match per rank, or nil
	for _, line := range d.Input {
		fields := strings.Fields(line)
		if fields[0] == "states" {
			if len(fields) != size+1 {
				return nil, nil, 0, nil, fmt.Errorf("%q: want %d rank states", line, size)
			}
			for k, s := range fields[1:] {
				a, tok, ok := strings.Cut(s, "/")
				n, err1 := strconv.Atoi(a)
				t, err2 := strconv.ParseInt(tok, 10, 64)
				if !ok || err1 != nil || err2 != nil {
					return nil, nil, 0, nil, fmt.Errorf("rank state %q, want requests/tokens", s)
				}
				states[k].NumActiveRequests, states[k].NumActiveTokens = n, t
			}
			continue
		}
		q, row, err := fixtureRequest(fields, size)
		if err != nil {
			return nil, nil, 0, nil, fmt.Errorf("request %q: %v", line, err)
		}
		reqs, rows = append(reqs, q), append(rows, row)
	}
	for i, row := range rows {
		if row == nil {
			continue
		}
		if matches == nil {
			matches = make([]int32, len(reqs)*size)
		}
		copy(matches[i*size:], row)
	}
	return states, reqs, int(m), matches, nil
}

func fixtureRequest(fields []string, size int) (Request, []int32, error) {
	id, err := strconv.ParseUint(fields[0], 10, 64)
	if err != nil {
		return Request{}, nil, fmt.Errorf("id: %v", err)
	}
	q := Request{ID: id, TargetRank: NoTarget}
	n, hasPrompt := 0, false
	var row []int32
	for _, a := range datadriven.ParseArgs(fields[1:]) {
		var err error
		switch a.Key {
		case "n":
			n, err = strconv.Atoi(a.Value)
		case "prompt":
			hasPrompt = true
			q.Tokens, err = int32List(a.Value)
		case "target":
			q.TargetRank, err = strconv.Atoi(a.Value)
		case "strict":
			q.Strict = true
		case "relaxed":
			q.Strict = false
		case "conv":
			q.ConversationID = a.Value
		case "match":
			row, err = int32List(a.Value)
			if err == nil && len(row) != size {
				err = fmt.Errorf("%d match lengths, want dp_size = %d", len(row), size)
			}
		default:
			err = fmt.Errorf("unknown field")
		}
		if err != nil {
			return q, nil, fmt.Errorf("%s: %v", a.Key, err)
		}
	}
	if hasPrompt {
		q.NumTokens = n
	} else {
		q.Tokens = prompt(n)
	}
	return q, row, nil
}

func int32List(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, err
		}
		out = append(out, int32(v))
	}
	return out, nil
}

// renderResult is the canonical text of a route result.
func renderResult(res *Result) string {
	list := func(ids []uint64) string {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = strconv.FormatUint(id, 10)
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	var b strings.Builder
	b.WriteString("assignment")
	for _, ids := range res.Assignment {
		b.WriteString(" " + list(ids))
	}
	fmt.Fprintf(&b, "\nexpected %d", res.Expected)
	if len(res.Unassigned) > 0 {
		b.WriteString("\nunassigned " + list(res.Unassigned))
	}
	return b.String()
}

func uintArg(d *datadriven.Directive, key string) (uint64, error) {
	for _, a := range d.Args {
		if a.Key == key {
			return strconv.ParseUint(a.Value, 10, 64)
		}
	}
	return 0, fmt.Errorf("missing argument %s=", key)
}

// onlyArgs reports an argument not named in keys.
func onlyArgs(d *datadriven.Directive, keys ...string) error {
	for _, a := range d.Args {
		if !slices.Contains(keys, a.Key) {
			return fmt.Errorf("unknown argument %q", a.Key)
		}
	}
	return nil
}

// noInput reports input lines, or arguments not named in keys, given to a
// command that takes no input.
func noInput(d *datadriven.Directive, keys ...string) error {
	if len(d.Input) > 0 {
		return fmt.Errorf("unexpected input %q", d.Input[0])
	}
	return onlyArgs(d, keys...)
}
