package sim

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseTrace(t *testing.T) {
	good := []struct {
		name, in string
		want     []TraceRecord
	}{
		{"one line", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`,
			[]TraceRecord{{0, 600, 5, []uint64{1, 2}}}},
		{"blank lines, CRLF, extra fields, float time, no final newline",
			"\n{\"timestamp\": 1.5, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [7], \"session_id\": \"x\"}\r\n\n" +
				`{"hash_ids": [7, 9], "output_length": 2, "input_length": 1024, "timestamp": 3}`,
			[]TraceRecord{{1.5, 512, 1, []uint64{7}}, {3, 1024, 2, []uint64{7, 9}}}},
		{"fewer ids than blocks", `{"timestamp": 0, "input_length": 5000, "output_length": 5, "hash_ids": [3]}`,
			[]TraceRecord{{0, 5000, 5, []uint64{3}}}},
		{"no ids", `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": []}`,
			[]TraceRecord{{0, 10, 5, []uint64{}}}},
	}
	for _, tc := range good {
		got, err := ParseTrace(strings.NewReader(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d records, want %d", tc.name, len(got), len(tc.want))
			continue
		}
		for i := range got {
			g, w := got[i], tc.want[i]
			if g.Timestamp != w.Timestamp || g.InputLength != w.InputLength || g.OutputLength != w.OutputLength || !slices.Equal(g.HashIDs, w.HashIDs) {
				t.Errorf("%s: record %d = %+v, want %+v", tc.name, i, g, w)
			}
		}
	}

	const ok = `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}` + "\n"
	bad := []struct {
		name, in string
		line     int
		field    string
		want     string
	}{
		{"empty", "", 0, "", "no requests"},
		{"only blank", "\n  \n", 0, "", "no requests"},
		{"not JSON", ok + "timestamp=3\n", 2, "", "not a JSON object"},
		{"array", "[1, 2]\n", 1, "", "want a JSON object"},
		{"truncated", ok + `{"timestamp": 0, "input_length"` + "\n", 2, "", "not a JSON object"},
		{"two objects on a line", ok + ok[:len(ok)-1] + ok, 2, "", "not a JSON object"},
		{"missing timestamp", `{"input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`, 1, "timestamp", "missing"},
		{"missing input_length", `{"timestamp": 0, "output_length": 5, "hash_ids": [1, 2]}`, 1, "input_length", "missing"},
		{"missing output_length", `{"timestamp": 0, "input_length": 600, "hash_ids": [1, 2]}`, 1, "output_length", "missing"},
		{"missing hash_ids", `{"timestamp": 0, "input_length": 600, "output_length": 5}`, 1, "hash_ids", "missing"},
		{"null hash_ids", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": null}`, 1, "hash_ids", "missing"},
		{"string timestamp", `{"timestamp": "0", "input_length": 600, "output_length": 5, "hash_ids": []}`, 1, "timestamp", "want a number of ms, got string"},
		{"negative timestamp", ok + `{"timestamp": -1, "input_length": 600, "output_length": 5, "hash_ids": []}`, 2, "timestamp", ">= 0"},
		{"fractional length", `{"timestamp": 0, "input_length": 60.5, "output_length": 5, "hash_ids": []}`, 1, "input_length", "want an integer, got number 60.5"},
		{"zero input", `{"timestamp": 0, "input_length": 0, "output_length": 5, "hash_ids": []}`, 1, "input_length", "0, want 1.."},
		{"zero output", `{"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": []}`, 1, "output_length", "0, want 1.."},
		{"negative id", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, -2]}`, 1, "hash_ids", "want an array of integers"},
		{"id too large", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [9223372036854775808]}`, 1, "hash_ids", "want < 2^63"},
		{"too many ids", `{"timestamp": 0, "input_length": 513, "output_length": 5, "hash_ids": [1, 2, 3]}`, 1, "hash_ids", "3 ids for 513 input tokens, want at most 2"},
		{"id moved", ok + `{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [2]}`, 2, "hash_ids", "[0] = 2 follows nothing (first block) here but id 1"},
		{"id after another parent", ok + `{"timestamp": 1, "input_length": 1600, "output_length": 5, "hash_ids": [1, 3, 2]}`, 2, "hash_ids", "[2] = 2 follows id 3 here but id 1"},
		{"id repeated in a line", `{"timestamp": 0, "input_length": 1600, "output_length": 5, "hash_ids": [4, 4]}`, 1, "hash_ids", "[1] = 4 follows id 4"},
	}
	for _, tc := range bad {
		_, err := ParseTrace(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
			continue
		}
		var te *TraceError
		if tc.line == 0 {
			if errors.As(err, &te) {
				t.Errorf("%s: %v is a line error", tc.name, err)
			}
			continue
		}
		if !errors.As(err, &te) || te.Line != tc.line || te.Field != tc.field {
			t.Errorf("%s: error %v, want line %d field %q", tc.name, err, tc.line, tc.field)
		}
	}
}

// FuzzParseTrace checks that ParseTrace never panics and that what it
// accepts satisfies what it promises.
func FuzzParseTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`))
	f.Add([]byte("{\"timestamp\": 1e3, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}\n\n{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := ParseTrace(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, r := range recs {
			if r.Timestamp < 0 || r.InputLength < 1 || r.OutputLength < 1 || len(r.HashIDs) > (r.InputLength+511)/512 {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}

// traceWorkload generates a trace workload from JSONL lines.
func traceWorkload(t *testing.T, jsonl string, edit func(*WorkloadConfig)) *Workload {
	t.Helper()
	recs, err := ParseTrace(strings.NewReader(jsonl))
	if err != nil {
		t.Fatal(err)
	}
	wc, _ := DefaultWorkload(KindTrace)
	wc.Trace, wc.TraceRecords = "test.jsonl", recs
	wc.OutputMin, wc.OutputMax = 1, 1<<24 // for checkCommon: a trace has its own lengths
	if edit != nil {
		edit(&wc)
	}
	w, err := Generate(wc)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestTraceReplay(t *testing.T) {
	const trace = `{"timestamp": 1000, "input_length": 1300, "output_length": 7, "hash_ids": [1, 2, 3]}
{"timestamp": 1500, "input_length": 1100, "output_length": 9, "hash_ids": [1, 2, 4]}
{"timestamp": 1200, "input_length": 700, "output_length": 3, "hash_ids": [1, 5]}
{"timestamp": 3000, "input_length": 2000, "output_length": 1, "hash_ids": [1]}
{"timestamp": 3000, "input_length": 1030, "output_length": 1, "hash_ids": [1, 2, 3]}
`
	tests := []struct {
		name       string
		time, size float64
		block      int
	}{
		{"as is", 1, 1, 512},
		{"time x0.5, lengths x0.25", 0.5, 0.25, 128},
		{"lengths x1.5", 1, 1.5, 768},
	}
	for _, tc := range tests {
		w := traceWorkload(t, trace, func(c *WorkloadConfig) { c.TraceTimeScale, c.TraceLengthScale = tc.time, tc.size })
		checkCommon(t, w)
		scale := func(n int) int { return max(int(float64(n)*tc.size+0.5), 1) }
		// Sessions are sorted by arrival: lines 1, 3, 2, 4, 5 (ties in order).
		order := []int{0, 2, 1, 3, 4}
		inputs := []int{1300, 1100, 700, 2000, 1030}
		outputs := []int{7, 9, 3, 1, 1}
		times := []float64{0, 500, 200, 2000, 2000} // ms after the first
		p := make([][]int32, 5)
		for i, line := range order {
			s := &w.Sessions[i]
			p[line] = w.Prompt(s, 0)
			if len(p[line]) != scale(inputs[line]) || s.Turns[0].Output != scale(outputs[line]) || s.Start != seconds(times[line]/1e3*tc.time) || s.ConvID != "" {
				t.Fatalf("%s: line %d became %d tokens, %d out, at %d ns", tc.name, line+1, len(p[line]), s.Turns[0].Output, s.Start)
			}
		}
		// Shared leading ids give shared blocks of the scaled size, and no more.
		b := tc.block
		for _, c := range []struct{ x, y, want int }{
			{0, 1, 2 * b}, // ids 1, 2 shared; 3 vs 4 differ
			{0, 2, b},     // id 1
			{0, 3, b},     // id 1, then line 4's own tokens
			{0, 4, scale(1030)},
		} {
			if got := commonPrefix(p[c.x], p[c.y]); got != c.want {
				t.Errorf("%s: lines %d and %d share %d tokens, want %d", tc.name, c.x+1, c.y+1, got, c.want)
			}
		}
	}
	// The token content is a function of the seed and the ids.
	a := traceWorkload(t, trace, nil)
	b := traceWorkload(t, trace, func(c *WorkloadConfig) { c.Seed = 2 })
	if pa, pb := a.Prompt(&a.Sessions[0], 0), b.Prompt(&b.Sessions[0], 0); slices.Equal(pa, pb) || !slices.Equal(pa, traceWorkload(t, trace, nil).Prompt(&a.Sessions[0], 0)) {
		t.Error("trace tokens do not follow the seed")
	}
}

func TestTraceValidate(t *testing.T) {
	recs := []TraceRecord{{0, 10, 1, nil}}
	tests := []struct {
		edit func(c *WorkloadConfig)
		want string
	}{
		{func(c *WorkloadConfig) { c.TraceRecords = nil }, "records"},
		{func(c *WorkloadConfig) { c.TraceTimeScale = 0 }, "trace_time_scale"},
		{func(c *WorkloadConfig) { c.TraceLengthScale = -1 }, "trace_length_scale"},
	}
	for _, tc := range tests {
		wc, _ := DefaultWorkload(KindTrace)
		wc.TraceRecords = recs
		tc.edit(&wc)
		if _, err := Generate(wc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one naming %s", err, tc.want)
		}
	}
}

// TestToTrace checks the trace generator: deterministic per seed, one
// record per request in arrival order, lengths kept, ids numbered by first
// appearance and shared exactly where prompts share whole 512-token blocks;
// and a replay of the trace has the same shape.
func TestToTrace(t *testing.T) {
	gen := func(seed uint64) ([]byte, []*Workload) {
		var wls []*Workload
		for _, k := range []string{KindMultiTenant, KindFollowUp} {
			wc := tinyWorkload(k)
			wc.Seed = seed
			w, err := Generate(wc)
			if err != nil {
				t.Fatal(err)
			}
			wls = append(wls, w)
		}
		var b bytes.Buffer
		if err := ToTrace(&b, wls); err != nil {
			t.Fatal(err)
		}
		return b.Bytes(), wls
	}
	out, wls := gen(1)
	again, _ := gen(1)
	other, _ := gen(2)
	if !bytes.Equal(out, again) || bytes.Equal(out, other) {
		t.Fatal("the trace is not a function of the seed")
	}
	recs, err := ParseTrace(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("the generated trace does not parse: %v", err)
	}
	n := 0
	var inputs, outputs []int
	var prompts [][]int32
	for _, w := range wls {
		n += w.NumRequests()
		for i := range w.Sessions {
			for k := range w.Sessions[i].Turns {
				p := w.Prompt(&w.Sessions[i], k)
				prompts = append(prompts, p)
				inputs = append(inputs, len(p))
				outputs = append(outputs, w.Sessions[i].Turns[k].Output)
			}
		}
	}
	if len(recs) != n {
		t.Fatalf("%d records for %d requests", len(recs), n)
	}
	next := uint64(0)
	var gotIn, gotOut []int
	for i, r := range recs {
		if i > 0 && r.Timestamp < recs[i-1].Timestamp {
			t.Fatalf("record %d is earlier than record %d", i, i-1)
		}
		if len(r.HashIDs) != (r.InputLength+511)/512 {
			t.Fatalf("record %d: %d ids for %d tokens", i, len(r.HashIDs), r.InputLength)
		}
		for _, id := range r.HashIDs {
			if id > next {
				t.Fatalf("record %d: id %d before id %d", i, id, next)
			}
			if id == next {
				next++
			}
		}
		gotIn, gotOut = append(gotIn, r.InputLength), append(gotOut, r.OutputLength)
	}
	slices.Sort(inputs)
	slices.Sort(gotIn)
	slices.Sort(outputs)
	slices.Sort(gotOut)
	if !slices.Equal(inputs, gotIn) || !slices.Equal(outputs, gotOut) {
		t.Error("the trace's lengths are not the workload's")
	}
	// Sharing: the number of distinct whole 512-token prefixes of the
	// workload equals the number of distinct ids at whole blocks.
	prefixes, ids := map[uint64]bool{}, map[uint64]bool{}
	for _, p := range prompts {
		for _, h := range AppendBlockHashes(nil, p, 512) {
			prefixes[h] = true
		}
	}
	for _, r := range recs {
		for _, id := range r.HashIDs[:r.InputLength/512] {
			ids[id] = true
		}
	}
	if len(prefixes) != len(ids) || len(ids) == 0 {
		t.Errorf("%d distinct whole-block prefixes in the workload, %d ids in the trace", len(prefixes), len(ids))
	}
	// Replayed, the trace keeps lengths and sharing: generating a trace from
	// the replay gives the same records, times shifted to start at 0.
	w := traceWorkload(t, string(out), nil)
	var b bytes.Buffer
	if err := ToTrace(&b, []*Workload{w}); err != nil {
		t.Fatal(err)
	}
	back, err := ParseTrace(&b)
	if err != nil || len(back) != len(recs) {
		t.Fatalf("replayed trace: %d records, %v", len(back), err)
	}
	for i := range recs {
		x, y := recs[i], back[i]
		if y.Timestamp != x.Timestamp-recs[0].Timestamp || x.InputLength != y.InputLength || x.OutputLength != y.OutputLength || !slices.Equal(x.HashIDs, y.HashIDs) {
			t.Fatalf("record %d: %+v replayed as %+v", i, x, y)
		}
	}
}
