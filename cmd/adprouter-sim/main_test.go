package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tiny makes a run fast: a short cold start on 4 small ranks.
var tiny = []string{"-dp", "4", "-kv-blocks", "512", "-quiet", "12", "-quiet-interval", "2", "-spike", "2", "-spike-factor", "40",
	"-system-tokens", "1024", "-output-max", "64", "-duration", "2"}

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	js, svg := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.svg")
	code, out, errs := runCmd(t, append(tiny, "-json", js, "-plot", svg)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"workload coldstart", "default", "kv_cache_aware+warmup", "conversation", "window prefill", "TTFT p50"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var rep struct {
		Tool string
		Runs []struct {
			Workload struct {
				Kind         string
				SystemTokens int `json:"system_tokens"`
			}
			Results []struct {
				Policy   string
				Requests int
				Window   *struct{ PrefillTokens int64 } `json:"window"`
			}
		}
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Tool != "adprouter-sim" || len(rep.Runs) != 1 || rep.Runs[0].Workload.Kind != "coldstart" ||
		rep.Runs[0].Workload.SystemTokens != 1024 || len(rep.Runs[0].Results) != 4 || rep.Runs[0].Results[0].Window == nil {
		t.Errorf("unexpected JSON: %s", b[:min(len(b), 600)])
	}
	s, err := os.ReadFile(svg)
	if err != nil || !bytes.HasPrefix(s, []byte("<svg")) || !bytes.Contains(s, []byte("kv_cache_aware+warmup")) {
		t.Errorf("bad SVG (%v): %.200s", err, s)
	}

	// Same flags, same bytes.
	js2 := filepath.Join(dir, "again.json")
	code, out2, _ := runCmd(t, append(tiny, "-json", js2)...)
	b2, _ := os.ReadFile(js2)
	if code != 0 || out2 != out || !bytes.Equal(b, b2) {
		t.Error("a second run with the same flags gave different output")
	}
	code, out3, _ := runCmd(t, append(tiny, "-seed", "9", "-q", "-json", "-")...)
	if code != 0 || bytes.Equal([]byte(out3), b) || !strings.HasPrefix(out3, "{") {
		t.Error("-seed 9 -json - did not print a different report")
	}
}

func TestRunWorkloadsAndPolicies(t *testing.T) {
	code, out, errs := runCmd(t, append(tiny, "-workload", "shared,siblings", "-policies", "default,conversation+least_queued",
		"-arrival", "bursty", "-burst-size", "3", "-rate", "20", "-ranks", "300,500,500,500", "-route-limit", "-1", "-timing", "-active-tokens", "context", "-eager-reuse")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"workload shared", "workload siblings", "conversation+least_queued", "[300 500 500 500] blocks", "bursty", "route us/call", "active tokens context, eager reuse"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRunFlagsAndErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string // in stdout or stderr
	}{
		{[]string{"-help"}, 0, "Workloads:"},
		{[]string{"-list-policies"}, 0, "kv_cache_aware+warmup"},
		{[]string{"-bogus"}, 2, "flag provided but not defined"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"-workload", "nope"}, 1, "unknown workload"},
		{[]string{"-policies", "nope"}, 1, "unknown policy variant"},
		{[]string{"-dp", "0"}, 1, "dp_size"},
		{[]string{"-ranks", "1,x"}, 1, "-ranks"},
		{[]string{"-active-tokens", "all"}, 1, "active_tokens"},
		{[]string{"-dp", "3", "-ranks", "1,2"}, 1, "-ranks lists 2"},
		{[]string{"-rate", "-1", "-workload", "shared"}, 1, "rate"},
		{[]string{"-json", "/nonexistent/dir/x.json", "-dp", "1", "-quiet", "2", "-spike", "0.2"}, 1, "no such file"},
	}
	for _, tc := range tests {
		code, out, errs := runCmd(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("%q: exit %d, want %d with %q; got:\n%s%s", tc.args, code, tc.code, tc.want, out, errs)
		}
	}
}
