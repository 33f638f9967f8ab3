package sim

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// TraceBlockTokens is the block size of the common trace format: each hash
// id names 512 prompt tokens.
const TraceBlockTokens = 512

// maxTraceHashID bounds hash ids (they select a random stream, see rng.go).
const maxTraceHashID = 1<<63 - 1

// TraceRecord is one request of a trace in the common JSONL format: one
// JSON object per line,
//
//	{"timestamp": 1200, "input_length": 1100, "output_length": 80, "hash_ids": [7, 8, 31]}
//
// timestamp is the arrival time in ms; input_length and output_length are
// the prompt and answer lengths in tokens; hash_ids name the prompt's
// 512-token blocks in order (the last one may be partial), prefix-chained:
// two requests share hash id i exactly when they share their first i+1
// blocks. Other fields are ignored.
type TraceRecord struct {
	Timestamp    float64  `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// traceLine is a line as decoded, before validation: pointers tell a
// missing field from a zero.
type traceLine struct {
	Timestamp    *float64  `json:"timestamp"`
	InputLength  *int64    `json:"input_length"`
	OutputLength *int64    `json:"output_length"`
	HashIDs      *[]uint64 `json:"hash_ids"`
}

// TraceError is a trace line that does not follow the format.
type TraceError struct {
	// Line is the 1-based line number; Field the offending field ("" for
	// the line as a whole).
	Line  int
	Field string
	// Problem says what is wrong and what was expected.
	Problem string
}

func (e *TraceError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("trace line %d: %s", e.Line, e.Problem)
	}
	return fmt.Sprintf("trace line %d: field %s: %s", e.Line, e.Field, e.Problem)
}

// ParseTrace reads a trace in the common JSONL format (see TraceRecord)
// and checks every line: the four fields present with the right types,
// timestamp >= 0, input_length and output_length >= 1, at most
// ceil(input_length/512) hash ids, and hash ids used consistently, each id
// always following the same id (or opening the prompt). Blank lines are
// skipped. The first problem found is returned as a *TraceError.
func ParseTrace(r io.Reader) ([]TraceRecord, error) {
	br := bufio.NewReader(r)
	var recs []TraceRecord
	parent := map[uint64]uint64{} // hash id -> previous id + 1 (0: first block)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("trace line %d: %w", n, err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			rec, perr := parseTraceLine(line, n, parent)
			if perr != nil {
				return nil, perr
			}
			recs = append(recs, rec)
		}
		if err == io.EOF {
			break
		}
	}
	if len(recs) == 0 {
		return nil, errors.New("trace: no requests (want one JSON object per line)")
	}
	return recs, nil
}

func parseTraceLine(line []byte, n int, parent map[uint64]uint64) (TraceRecord, error) {
	bad := func(field, format string, a ...any) error {
		return &TraceError{Line: n, Field: field, Problem: fmt.Sprintf(format, a...)}
	}
	var l traceLine
	if err := json.Unmarshal(line, &l); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			want := map[string]string{"timestamp": "a number of ms", "input_length": "an integer",
				"output_length": "an integer", "hash_ids": "an array of integers in [0, 2^63)"}[te.Field]
			if want == "" {
				return TraceRecord{}, bad("", "want a JSON object, got %s", te.Value)
			}
			return TraceRecord{}, bad(te.Field, "want %s, got %s", want, te.Value)
		}
		return TraceRecord{}, bad("", "not a JSON object: %v", err)
	}
	switch {
	case l.Timestamp == nil:
		return TraceRecord{}, bad("timestamp", "missing")
	case l.InputLength == nil:
		return TraceRecord{}, bad("input_length", "missing")
	case l.OutputLength == nil:
		return TraceRecord{}, bad("output_length", "missing")
	case l.HashIDs == nil:
		return TraceRecord{}, bad("hash_ids", "missing (want an array, [] for none)")
	}
	if t := *l.Timestamp; !(t >= 0) || math.IsInf(t, 0) {
		return TraceRecord{}, bad("timestamp", "%v, want a finite number of ms >= 0", t)
	}
	const maxLen = 1 << 24
	if v := *l.InputLength; v < 1 || v > maxLen {
		return TraceRecord{}, bad("input_length", "%d, want 1..%d", v, maxLen)
	}
	if v := *l.OutputLength; v < 1 || v > maxLen {
		return TraceRecord{}, bad("output_length", "%d, want 1..%d", v, maxLen)
	}
	ids := *l.HashIDs
	blocks := (int(*l.InputLength) + TraceBlockTokens - 1) / TraceBlockTokens
	if len(ids) > blocks {
		return TraceRecord{}, bad("hash_ids", "%d ids for %d input tokens, want at most %d (one per %d-token block)",
			len(ids), *l.InputLength, blocks, TraceBlockTokens)
	}
	for i, id := range ids {
		if id > maxTraceHashID {
			return TraceRecord{}, bad("hash_ids", "[%d] = %d, want < 2^63", i, id)
		}
		want := uint64(0)
		if i > 0 {
			want = ids[i-1] + 1
		}
		if got, ok := parent[id]; !ok {
			parent[id] = want
		} else if got != want {
			return TraceRecord{}, bad("hash_ids", "[%d] = %d follows %s here but %s before; want prefix-chained ids (the same id always after the same id)",
				i, id, describeParent(want), describeParent(got))
		}
	}
	return TraceRecord{Timestamp: *l.Timestamp, InputLength: int(*l.InputLength),
		OutputLength: int(*l.OutputLength), HashIDs: ids}, nil
}

func describeParent(p uint64) string {
	if p == 0 {
		return "nothing (first block)"
	}
	return "id " + strconv.FormatUint(p-1, 10)
}

// ReadTraceFile parses the trace in the named file and returns a trace
// workload configuration for it, with the default scales.
func ReadTraceFile(name string) (WorkloadConfig, error) {
	wc, _ := DefaultWorkload(KindTrace)
	f, err := os.Open(name)
	if err != nil {
		return wc, err
	}
	defer f.Close()
	recs, err := ParseTrace(f)
	if err != nil {
		return wc, fmt.Errorf("%s: %w", name, err)
	}
	wc.Trace, wc.TraceRecords = filepath.Base(name), recs
	return wc, nil
}

// validateTrace checks the fields of a trace workload.
func (w *WorkloadConfig) validateTrace() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("workload trace %s: %s = %v, want %s", w.Trace, field, v, want)
	}
	pos := func(f float64) bool { return f > 0 && !math.IsInf(f, 0) }
	if len(w.TraceRecords) == 0 {
		return bad("records", 0, "at least one (see ParseTrace)")
	}
	if !pos(w.TraceTimeScale) {
		return bad("trace_time_scale", w.TraceTimeScale, "> 0")
	}
	if !pos(w.TraceLengthScale) {
		return bad("trace_length_scale", w.TraceLengthScale, "> 0")
	}
	return nil
}

// scaleLen scales a length by the trace length scale, to at least 1 token.
func (w *WorkloadConfig) scaleLen(n int) int {
	return max(int(math.Round(float64(n)*w.TraceLengthScale)), 1)
}

// fromTrace builds the sessions of a trace workload: one single-turn
// session per record, its prompt made of the tokens of its hash ids (block
// id h is the same scaled-block-size tokens, drawn from h and the seed,
// wherever it appears; a partial last block is a prefix of them) and, past
// the blocks its ids cover, tokens of its own.
func (w *Workload) fromTrace() {
	cfg := &w.Config
	block := cfg.scaleLen(TraceBlockTokens)
	first := math.Inf(1)
	for _, r := range cfg.TraceRecords {
		first = min(first, r.Timestamp)
	}
	contents := map[uint64][]int32{}
	for i, r := range cfg.TraceRecords {
		n := cfg.scaleLen(r.InputLength)
		p := make([]int32, 0, n)
		for _, id := range r.HashIDs {
			if len(p) >= n {
				break
			}
			c, ok := contents[id]
			if !ok {
				c = newRNG(cfg.Seed, streamTraceBlock|id).tokens(nil, block, cfg.Vocab)
				contents[id] = c
			}
			p = append(p, c[:min(block, n-len(p))]...)
		}
		if len(p) < n {
			p = newRNG(cfg.Seed, streamTraceTail+uint64(i)).tokens(p, n-len(p), cfg.Vocab)
		}
		at := seconds((r.Timestamp - first) / 1e3 * cfg.TraceTimeScale)
		w.Sessions = append(w.Sessions, Session{Group: -1, Start: at, Prefix: p,
			Turns: []Turn{{Output: cfg.scaleLen(r.OutputLength)}}})
	}
}

// ToTrace writes the workloads as one trace in the common JSONL format,
// merged in order of arrival: the generator of test traces. Every request of every
// session becomes a record; hash ids are numbered in order of first
// appearance and shared exactly where prompts share whole blocks (a partial
// last block gets an id of its own). A trace records no dependency between
// requests, so a conversation's later turn is stamped with its previous
// turn's time plus its think time, as if answers were instant; answers are
// the ones the simulator generates. Timestamps are whole ms.
func ToTrace(w io.Writer, wls []*Workload) error {
	const blockTokens = TraceBlockTokens
	type pending struct {
		at     int64
		order  int
		prompt []int32
		output int
	}
	var reqs []pending
	for _, wl := range wls {
		for i := range wl.Sessions {
			s := &wl.Sessions[i]
			at := s.Start
			for k := range s.Turns {
				at += s.Turns[k].Think
				reqs = append(reqs, pending{at: at, order: len(reqs), prompt: wl.Prompt(s, k), output: s.Turns[k].Output})
			}
		}
	}
	slices.SortStableFunc(reqs, func(a, b pending) int {
		if a.at != b.at {
			return int(min(max(a.at-b.at, -1), 1))
		}
		return a.order - b.order
	})
	type blockKey struct {
		hash uint64
		n    int
	}
	ids := map[blockKey]uint64{}
	bw := bufio.NewWriter(w)
	var buf []byte
	for _, q := range reqs {
		var h uint64
		buf = append(buf[:0], `{"timestamp":`...)
		buf = strconv.AppendInt(buf, q.at/1e6, 10)
		buf = append(buf, `,"input_length":`...)
		buf = strconv.AppendInt(buf, int64(len(q.prompt)), 10)
		buf = append(buf, `,"output_length":`...)
		buf = strconv.AppendInt(buf, int64(q.output), 10)
		buf = append(buf, `,"hash_ids":[`...)
		for b := 0; b*blockTokens < len(q.prompt); b++ {
			blk := q.prompt[b*blockTokens : min((b+1)*blockTokens, len(q.prompt))]
			h = chainBlock(h, blk)
			key := blockKey{h, len(blk)}
			id, ok := ids[key]
			if !ok {
				id = uint64(len(ids))
				ids[key] = id
			}
			if b > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendUint(buf, id, 10)
		}
		buf = append(buf, "]}\n"...)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// chainBlock hashes one block of tokens, partial or full, chained to the
// hash of the blocks before it (FNV-1a over the parent and the tokens): the
// identity of a prefix for numbering a trace's hash_ids, the same on every
// run.
func chainBlock(parent uint64, blk []int32) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], parent)
	h.Write(b[:])
	for _, t := range blk {
		binary.LittleEndian.PutUint32(b[:4], uint32(t))
		h.Write(b[:4])
	}
	return h.Sum64()
}
