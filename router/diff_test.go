package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Differential test against the pure-Python oracle
// python/tests/reference.py (which uses CPython's own random.Random for
// the tie-break): a few hundred random multi-call cases, all policies, many
// ties, ids across the whole uint64 range, dp sizes 1..70, fed to one Python
// process; every decision (or error-vs-success) must agree.

const referencePath = "../python/tests/reference.py"

type refConfig struct {
	Policy              string  `json:"policy"`
	DPSize              int     `json:"dp_size"`
	LoadBalanceWeight   float64 `json:"load_balance_weight"`
	MatchRateThreshold  float64 `json:"match_rate_threshold"`
	FairShareMultiplier float64 `json:"fair_share_multiplier"`
	ColdStartWarmup     bool    `json:"cold_start_warmup"`
	MaxSessions         int     `json:"max_sessions"`
	NewConvPlacement    string  `json:"new_conv_placement"`
}

type refRequest struct {
	ID             uint64  `json:"id"`
	Tokens         []int32 `json:"tokens"` // null when nil
	NumTokens      *int    `json:"num_tokens"`
	TargetRank     *int    `json:"target_rank"`
	Relax          bool    `json:"relax"`
	ConversationID *string `json:"conversation_id"`
}

type refCall struct {
	States    [][3]int64   `json:"states"`
	Requests  []refRequest `json:"requests"`
	MaxActive int          `json:"max_num_active_requests"`
	MatchLens [][]int32    `json:"match_lens"` // [rank][request], null when nil
}

type refCase struct {
	Config refConfig `json:"config"`
	Calls  []refCall `json:"calls"`
}

type refResult struct {
	Assignment [][]uint64 `json:"assignment"`
	Expected   int        `json:"expected"`
	Unassigned []uint64   `json:"unassigned"`
	Error      *string    `json:"error"`
}

func toRefConfig(c Config) refConfig {
	return refConfig{string(c.Policy), c.DPSize, c.LoadBalanceWeight, c.MatchRateThreshold,
		c.FairShareMultiplier, c.ColdStartWarmup, c.MaxSessions, string(c.NewConvPlacement)}
}

func toRefCall(a callArgs, size int) refCall {
	rc := refCall{MaxActive: a.maxn, Requests: []refRequest{}, States: [][3]int64{}}
	for _, s := range a.states {
		rc.States = append(rc.States, [3]int64{int64(s.Rank), int64(s.NumActiveRequests), s.NumActiveTokens})
	}
	for _, q := range a.reqs {
		rq := refRequest{ID: q.ID, Tokens: q.Tokens, Relax: !q.Strict}
		if q.NumTokens > 0 {
			n := q.NumTokens
			rq.NumTokens = &n
		}
		if q.TargetRank != NoTarget {
			t := q.TargetRank
			rq.TargetRank = &t
		}
		if q.ConversationID != "" {
			c := q.ConversationID
			rq.ConversationID = &c
		}
		rc.Requests = append(rc.Requests, rq)
	}
	if a.matches != nil {
		// Row-major [request][rank] -> per-rank rows. A table of the wrong
		// length keeps the wrong length in its last row.
		n := len(a.reqs)
		for k := range size {
			row := []int32{}
			for i := range n {
				if j := i*size + k; j < len(a.matches) {
					row = append(row, a.matches[j])
				}
			}
			rc.MatchLens = append(rc.MatchLens, row)
		}
		if extra := len(a.matches) - n*size; extra > 0 && size > 0 {
			rc.MatchLens[size-1] = append(rc.MatchLens[size-1], a.matches[n*size:]...)
		}
	}
	return rc
}

// diffConfig draws a configuration; a few are invalid.
func diffConfig(rng *rand.Rand) Config {
	c := randConfig(rng)
	// Options the reference lacks stay at their reference-equivalent values.
	c.CapacityAware = false
	c.PrefixSource, c.TokensPerBlock = SourceProbe, DefaultTokensPerBlock
	if c.Warmup == WarmupOnce {
		c.ColdStartWarmup = true // the same thing, spelled the reference's way
	}
	c.Warmup = "" // unset: follows ColdStartWarmup
	c.DPSize = pick(rng, 1, 2, 3, 4, 4, 5, 8, 8, 16, 1+rng.IntN(70))
	if rng.IntN(25) == 0 {
		switch rng.IntN(5) {
		case 0:
			c.DPSize = 0
		case 1:
			c.MaxSessions = 0
		case 2:
			c.NewConvPlacement = "nearest"
		case 3:
			c.LoadBalanceWeight = -1
		default:
			c.Policy = PolicyKVCacheAware
			c.FairShareMultiplier = 0.5
		}
	}
	return c
}

// diffCall draws a call with many ties: idle or equally loaded ranks,
// identical prompt sizes and families, zero-token requests.
func diffCall(rng *rand.Rand, size int) callArgs {
	a := randCall(rng, max(size, 1))
	if size == 0 {
		a.states = nil
	}
	for k := range a.states {
		a.states[k] = RankState{Rank: a.states[k].Rank, NumActiveRequests: a.states[k].NumActiveRequests,
			NumActiveTokens: a.states[k].NumActiveTokens} // no KV fields: the reference has none
	}
	for i := range a.reqs {
		a.reqs[i].MaxNewTokens = 0
	}
	switch rng.IntN(3) {
	case 0: // idle ranks, equal prompts: full ties everywhere
		for k := range a.states {
			a.states[k].NumActiveRequests, a.states[k].NumActiveTokens = 0, 0
		}
		for i := range a.reqs {
			a.reqs[i].Tokens, a.reqs[i].NumTokens = prompt(10), 0
		}
	case 1: // equal loads
		for k := range a.states {
			a.states[k].NumActiveTokens = 500
		}
	}
	if rng.IntN(8) == 0 {
		for i := range a.reqs {
			a.reqs[i].Tokens, a.reqs[i].NumTokens = nil, 0 // zero-token requests
		}
		if a.matches != nil && rng.IntN(2) == 0 {
			for j := range a.matches {
				a.matches[j] = int32(rng.IntN(2))
			}
		}
	}
	if rng.IntN(15) == 0 && size > 0 {
		a = breakCall(rng, a, size)
	}
	return a
}

func TestDifferentialAgainstPythonReference(t *testing.T) {
	if testing.Short() {
		t.Skip("differential test against the Python reference skipped under -short")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	script, err := filepath.Abs(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		t.Skipf("reference implementation not found: %v", err)
	}

	const ncases = 400
	rng := rand.New(rand.NewPCG(20261130, 1))
	var (
		doc struct {
			Cases []refCase `json:"cases"`
		}
		configs []Config
		calls   [][]callArgs
	)
	for range ncases {
		cfg := diffConfig(rng)
		rc := refCase{Config: toRefConfig(cfg)}
		var cs []callArgs
		for range 1 + rng.IntN(5) {
			a := diffCall(rng, cfg.DPSize)
			cs = append(cs, a)
			rc.Calls = append(rc.Calls, toRefCall(a, cfg.DPSize))
		}
		doc.Cases = append(doc.Cases, rc)
		configs = append(configs, cfg)
		calls = append(calls, cs)
	}
	input, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(python, script)
	cmd.Stdin = bytes.NewReader(input)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstderr: %s", python, script, err, stderr.String())
	}
	var out struct {
		Results [][]refResult `json:"results"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("decoding the reference's output: %v\n%.2000s", err, stdout.String())
	}
	if len(out.Results) != ncases {
		t.Fatalf("reference returned %d case results, want %d", len(out.Results), ncases)
	}

	var decisions, errorsAgreed, ties, mismatches int
	report := func(ci, call int, format string, args ...any) {
		mismatches++
		if mismatches <= 8 {
			js, _ := json.Marshal(refCase{Config: doc.Cases[ci].Config, Calls: doc.Cases[ci].Calls[:call+1]})
			t.Errorf("case %d call %d: %s\nreproduce: echo '{\"cases\": [%s]}' | python3 %s",
				ci, call, fmt.Sprintf(format, args...), js, referencePath)
		}
	}
	for ci, cfg := range configs {
		want := out.Results[ci]
		if len(want) != len(calls[ci]) {
			t.Fatalf("case %d: reference returned %d call results, want %d", ci, len(want), len(calls[ci]))
		}
		cfg.Explain = ci%2 == 0 // receipts must not change a decision
		r, err := New(cfg)
		for call, a := range calls[ci] {
			w := want[call]
			if err != nil { // invalid config: every call must fail in Python too
				if w.Error == nil {
					report(ci, call, "Go rejects the config (%v), the reference routes %+v", err, w)
				} else {
					errorsAgreed++
				}
				continue
			}
			res, rerr := r.Route(a.states, a.reqs, a.maxn, a.matches)
			switch {
			case rerr != nil && w.Error == nil:
				report(ci, call, "Go rejects the call (%v), the reference routes it: %+v", rerr, w)
			case rerr == nil && w.Error != nil:
				report(ci, call, "Go routes the call (%+v), the reference rejects it: %s", res, *w.Error)
			case rerr != nil:
				errorsAgreed++
			default:
				decisions++
				if maxTies(a) {
					ties++
				}
				if cfg.Explain {
					if err := checkReceipts(cfg, a.states, a.reqs, res, r.Receipts()); err != nil {
						report(ci, call, "receipts: %v", err)
					}
				}
				got := &Result{Assignment: res.Assignment, Expected: res.Expected, Unassigned: res.Unassigned}
				exp := &Result{Assignment: w.Assignment, Expected: w.Expected, Unassigned: w.Unassigned}
				if !eqAssign(got.Assignment, exp.Assignment) || got.Expected != exp.Expected ||
					!slices.Equal(got.Unassigned, exp.Unassigned) {
					report(ci, call, "Go %v expected %d unassigned %v; reference %v expected %d unassigned %v",
						got.Assignment, got.Expected, got.Unassigned, exp.Assignment, exp.Expected, exp.Unassigned)
				}
			}
		}
	}
	if mismatches > 8 {
		t.Errorf("... %d mismatches in all", mismatches)
	}
	t.Logf("%d cases: %d decisions compared (%d on idle ranks), %d errors agreed, reference took %v",
		ncases, decisions, ties, errorsAgreed, time.Since(start).Round(time.Millisecond))
	// The comparison must have had substance.
	if decisions < ncases || errorsAgreed == 0 || ties == 0 {
		t.Errorf("too little coverage: %d decisions, %d errors, %d tie-heavy calls", decisions, errorsAgreed, ties)
	}
}

// maxTies reports a call on idle ranks, where the tie-break decides.
func maxTies(a callArgs) bool {
	for _, s := range a.states {
		if s.NumActiveRequests != 0 || s.NumActiveTokens != 0 {
			return false
		}
	}
	return len(a.reqs) > 1
}
