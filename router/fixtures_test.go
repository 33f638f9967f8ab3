package router

import (
	"flag"
	"fmt"
	"os"
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

// The rewrite mode: with -rewrite (go test ./router -run TestRoutingFixtures
// -rewrite) or ADPR_FIXTURES_REWRITE=1 in the environment, every fixture
// file's expected outputs are replaced by what the router produces now; the
// directives, their input and the comments are kept. Review the diff: the
// other suites (C++ harness, Python binding and reference) then check the
// new expectations.
var fixturesRewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of testdata/routing/*.txt from the router's")

func rewriteFixtures() bool {
	return *fixturesRewrite || os.Getenv("ADPR_FIXTURES_REWRITE") == "1"
}

// TestRoutingFixtures runs every fixture through the Router API.
func TestRoutingFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s (%v)", fixtureDir, err)
	}
	rewrite := rewriteFixtures()
	total := 0
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ds, err := datadriven.Parse(path, string(data))
			if err != nil {
				t.Fatal(err)
			}
			var f fixtureRunner
			outs := make([]string, len(ds))
			for i := range ds {
				d := &ds[i]
				got, err := f.run(d)
				outs[i] = got
				switch {
				case err != nil:
					outs[i] = d.Want // a failed directive keeps its expectation
					t.Errorf("%s: %s: %v", d.Pos, d.Cmd, err)
				case got != d.Want && !rewrite:
					t.Errorf("%s: %s: got\n%s\nwant\n%s", d.Pos, d.Cmd, got, d.Want)
				}
			}
			total += len(ds)
			t.Logf("%d directives", len(ds))
			if !rewrite {
				return
			}
			text, err := datadriven.Rewrite(string(data), ds, outs)
			if err != nil {
				t.Fatal(err)
			}
			if text != string(data) {
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("rewrote %s", path)
			}
		})
	}
	t.Logf("routing fixtures: %d files, %d directives", len(files), total)
}

// fixtureRunner runs the directives of one file, in order, on the router of
// the latest "new".
type fixtureRunner struct {
	r      *Router
	routed bool // a route directive ran on r
}

func (f *fixtureRunner) run(d *datadriven.Directive) (string, error) {
	switch d.Cmd {
	case "new":
		f.r, f.routed = nil, false // a failed "new" fails the directives that follow
		if len(d.Input) > 0 {
			return "", fmt.Errorf("unexpected input %q", d.Input[0])
		}
		cfg, err := fixtureConfig(d.Args)
		if err != nil {
			return "", err
		}
		f.r, err = New(cfg)
		return "", err
	case "route", "stats", "state", "receipts":
		if f.r == nil {
			return "", fmt.Errorf(`no router: "new" must come first`)
		}
	}
	switch d.Cmd {
	case "route":
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
		if f.r.Config().Explain {
			// The Go suite also holds every receipt to the property the
			// random tests check.
			if err := checkReceipts(f.r.Config(), states, reqs, res, f.r.Receipts()); err != nil {
				return "", err
			}
		}
		f.routed = true
		return renderResult(res), nil
	case "stats":
		s := f.r.Stats(0)
		return fmt.Sprintf("pending_warmup %d\nconversations %d", s.PendingWarmup, s.Conversations), noInput(d)
	case "state":
		var b strings.Builder
		b.WriteString("pending_warmup [")
		for i, k := range f.r.PendingWarmup() {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(strconv.Itoa(k))
		}
		b.WriteString("]\nconversations [")
		for i, c := range f.r.Conversations() {
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%s=%d", c.ConversationID, c.Rank)
		}
		b.WriteString("]")
		return b.String(), noInput(d)
	case "receipts":
		return f.receipts(d)
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
	return "", fmt.Errorf("unknown command (want new, route, stats, state, receipts, shuffle or genrand)")
}

// receipts renders the receipts of the last decision: every request's, in
// request order, or those of the ids given (id=7 or id=7,9), in that order.
func (f *fixtureRunner) receipts(d *datadriven.Directive) (string, error) {
	if err := noInput(d, "id"); err != nil {
		return "", err
	}
	if !f.r.Config().Explain {
		return "", fmt.Errorf("receipts need a router made with explain=true")
	}
	if !f.routed {
		return "", fmt.Errorf(`no decision: "route" must come first`)
	}
	rcs := f.r.Receipts()
	var ids []string
	for _, a := range d.Args {
		ids = append(ids, strings.Split(a.Value, ",")...)
	}
	var texts []string
	if len(d.Args) > 0 {
		for _, s := range ids {
			id, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return "", fmt.Errorf("id %q: %v", s, err)
			}
			k := slices.IndexFunc(rcs, func(rc Receipt) bool { return rc.ID == id })
			if k < 0 {
				return "", fmt.Errorf("no request %d in the last decision", id)
			}
			texts = append(texts, rcs[k].String())
		}
	} else {
		for i := range rcs {
			texts = append(texts, rcs[i].String())
		}
	}
	return strings.Join(texts, "\n"), nil
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
	first := x[0] // rewriting: the permutation's own first element
	if !rewriteFixtures() {
		first, err = strconv.Atoi(strings.Fields(d.Want + " -1")[0])
		if err != nil {
			return "", fmt.Errorf("expected output %q is not a permutation", d.Want)
		}
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
				if err := fixtureState(&states[k], s); err != nil {
					return nil, nil, 0, nil, err
				}
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

// fixtureState parses one rank state: requests/tokens, or
// requests/tokens/free_kv_tokens/kv_capacity_tokens.
func fixtureState(s *RankState, text string) error {
	parts := strings.Split(text, "/")
	var v [4]int64
	if len(parts) != 2 && len(parts) != 4 {
		return fmt.Errorf("rank state %q, want requests/tokens or requests/tokens/free/capacity", text)
	}
	for i, p := range parts {
		var err error
		if v[i], err = strconv.ParseInt(p, 10, 64); err != nil {
			return fmt.Errorf("rank state %q: %v", text, err)
		}
	}
	s.NumActiveRequests, s.NumActiveTokens = int(v[0]), v[1]
	s.FreeKVTokens, s.KVCapacityTokens = v[2], v[3]
	return nil
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
		case "lora":
			q.LoRAID, err = strconv.ParseUint(a.Value, 10, 64)
		case "salt":
			q.CacheSalt, err = strconv.ParseUint(a.Value, 10, 64)
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

// maxListLen bounds a list's expansion (a typo must not allocate gigabytes).
const maxListLen = 1 << 20

// int32List parses a comma-separated list whose items are a value v, a run
// lo..hi (lo, lo+1, ..., hi) or a repetition v*k (k copies of v).
func int32List(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Split(s, ",") {
		lo, hi, isRun := strings.Cut(f, "..")
		v, k, isRep := strings.Cut(f, "*")
		switch {
		case isRun:
			a, err1 := strconv.ParseInt(lo, 10, 32)
			b, err2 := strconv.ParseInt(hi, 10, 32)
			if err1 != nil || err2 != nil || b < a || b-a >= maxListLen {
				return nil, fmt.Errorf("run %q, want lo..hi with lo <= hi", f)
			}
			for x := a; x <= b; x++ {
				out = append(out, int32(x))
			}
		case isRep:
			a, err1 := strconv.ParseInt(v, 10, 32)
			c, err2 := strconv.ParseInt(k, 10, 32)
			if err1 != nil || err2 != nil || c < 0 || c > maxListLen {
				return nil, fmt.Errorf("repetition %q, want value*count", f)
			}
			for range c {
				out = append(out, int32(a))
			}
		default:
			x, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				return nil, err
			}
			out = append(out, int32(x))
		}
		if len(out) > maxListLen {
			return nil, fmt.Errorf("list longer than %d", maxListLen)
		}
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
	v, ok := d.Get(key)
	if !ok {
		return 0, fmt.Errorf("missing argument %s=", key)
	}
	return strconv.ParseUint(v, 10, 64)
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
