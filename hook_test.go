// The TensorRT-LLM start-up hook (python/adprouter-trtllm.pth and
// python/_adprouter_startup.py) in MPI workers spawned the way TensorRT-LLM spawns
// them: mpi4py's MPIPoolExecutor(max_workers=n, path=sys.path, env={the
// TRTLLM*/TLLM* variables}) from a process run by mpirun. Like mpi_test.go:
// skipped under -short and, outside CI, when OpenMPI or Debian's
// python3-mpi4py is missing; under CI a failure, since .ci/run installs them.
package adprouter_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hookDriver is what mpirun runs: it spawns two workers as TensorRT-LLM
// does, after setting the KEY=VALUE arguments after its first in its own
// environment (after MPI_Init, so they reach the workers through env= only),
// and has each worker import the fake router module (argv[1] holds the fake
// package) and create a KV-aware router. It prints one JSON line.
const hookDriver = `import json, os, sys, time
from mpi4py.futures import MPIPoolExecutor

MODULE = "tensorrt_llm._torch.pyexecutor.scheduler.adp_router"


def route(hold):
    import importlib
    from types import SimpleNamespace as NS
    loaded = any(k.split(".")[0] == "adprouter" for k in sys.modules)
    m = importlib.import_module(MODULE)
    dist = NS(tp_rank=0, tp_size=2, mapping=NS(dp_size=2), has_cp_helix=False, tp_allgather=lambda o: [o, o])
    r = m.ADPRouter.create(dist, NS(enable_block_reuse=True, tokens_per_block=32),
                           NS(enable_kv_cache_aware_routing=True))
    time.sleep(hold)  # so that the other task goes to the other worker
    return {"router": r if isinstance(r, str) else type(r).__module__,
            "needs_prefix_matches": getattr(r, "needs_prefix_matches", None),
            "pid": os.getpid(), "adprouter_before_create": loaded}


if __name__ == "__main__":
    fake = sys.argv[1]
    for arg in sys.argv[2:]:
        k, v = arg.split("=", 1)
        os.environ[k] = v
    # TensorRT-LLM's executor forwards these and nothing else.
    env = {k: v for k, v in os.environ.items() if k.startswith("TRTLLM") or k.startswith("TLLM")}
    workers = {}
    with MPIPoolExecutor(max_workers=2, path=sys.path + [fake], env=env) as pool:
        for _ in range(5):
            for r in pool.map(route, [0.3, 0.3]):
                workers[r["pid"]] = r
            if len(workers) >= 2:
                break
    print(json.dumps({"driver": os.getpid(), "forwarded": sorted(env), "workers": list(workers.values())}))
`

type hookWorker struct {
	Router             string `json:"router"`
	NeedsPrefixMatches *bool  `json:"needs_prefix_matches"`
	Pid                int    `json:"pid"`
	AdprouterBefore    bool   `json:"adprouter_before_create"`
}

type hookReport struct {
	Driver    int          `json:"driver"`
	Forwarded []string     `json:"forwarded"`
	Workers   []hookWorker `json:"workers"`
}

// With TRTLLM_ADPROUTER=1 in mpirun's environment, or only in the variables
// the driver forwards through env= (which mpi4py sets in a worker after its
// interpreter started), both workers spawned the TensorRT-LLM way get
// adprouter.trtllm's router from the fake's ADPRouter.create, with the options
// of the TRTLLM_ADPROUTER_* variables (needs_prefix_matches False under preset
// index); without it they get the fake's own router and never import
// adprouter.
func TestHookMPIWorkers(t *testing.T) {
	py := debianPython(t, "mpi4py.futures, venv", "python3-mpi4py python3-venv")
	library(t) // build/libadprouter.so, which the checkout's adprouter loads by itself

	// A venv of Debian's python (its mpi4py through --system-site-packages)
	// whose site-packages holds a path to the checkout's python/ folder and
	// the hook, as an installed wheel would. The path's .pth sorts first.
	dir := t.TempDir()
	run(t, nil, py, "-m", "venv", "--system-site-packages", "--without-pip", filepath.Join(dir, "venv"))
	vpy := filepath.Join(dir, "venv", "bin", "python")
	site := strings.TrimSpace(run(t, nil, vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
	pyDir, err := filepath.Abs("python")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(site, "adprouter-checkout.pth"), []byte(pyDir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	copyFile(t, "python/adprouter-trtllm.pth", filepath.Join(site, "adprouter-trtllm.pth"))
	fake := filepath.Join(dir, "fake")
	run(t, nil, py, "python/tests/fake_trtllm.py", fake)
	driver := filepath.Join(dir, "driver.py")
	if err := os.WriteFile(driver, []byte(hookDriver), 0o644); err != nil {
		t.Fatal(err)
	}

	// Nothing from this environment that would reach the workers or point
	// Python at the library or the checkout.
	var base []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "TRTLLM") && !strings.HasPrefix(k, "TLLM") && !strings.HasPrefix(k, "ADPROUTER_") &&
			k != "PYTHONPATH" {
			base = append(base, kv)
		}
	}

	for _, tc := range []struct {
		name   string
		env    []string // in mpirun's environment
		args   []string // set by the driver before it spawns: forwarded by env= only
		router string
		needs  bool
	}{
		{"on", []string{"TRTLLM_ADPROUTER=1", "TRTLLM_ADPROUTER_PRESET=index"}, nil, "adprouter.trtllm", false},
		{"off", []string{"TRTLLM_ADPROUTER_PRESET=index"}, nil, "theirs", false},
		{"options_forwarded", []string{"TRTLLM_ADPROUTER=1"}, []string{"TRTLLM_ADPROUTER_PRESET=index"}, "adprouter.trtllm", false},
		{"all_forwarded", nil, []string{"TRTLLM_ADPROUTER=1", "TRTLLM_ADPROUTER_PRESET=index"}, "adprouter.trtllm", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append(append([]string{}, base...), tc.env...)
			out, code := hookMpirun(t, env, append([]string{vpy, driver, fake}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d, want 0\n%s", code, out)
			}
			var rep hookReport
			var line string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "{") {
					line = l
					if err := json.Unmarshal([]byte(l), &rep); err != nil {
						t.Fatalf("%v: %s", err, l)
					}
				}
			}
			if len(rep.Workers) != 2 || rep.Workers[0].Pid == rep.Workers[1].Pid {
				t.Fatalf("want reports from 2 workers, got %+v\n%s", rep, out)
			}
			if want := len(tc.env) + len(tc.args); len(rep.Forwarded) != want {
				t.Errorf("the driver forwarded %v, want the %d TRTLLM variables", rep.Forwarded, want)
			}
			for _, w := range rep.Workers {
				if w.Pid == rep.Driver || w.Pid <= 0 {
					t.Errorf("worker pid %d, driver %d: want a spawned process", w.Pid, rep.Driver)
				}
				if w.Router != tc.router {
					t.Errorf("worker %d: router %q, want %q", w.Pid, w.Router, tc.router)
				}
				if tc.router == "theirs" {
					if w.AdprouterBefore || w.NeedsPrefixMatches != nil {
						t.Errorf("worker %d with the hook off: adprouter imported %v, router %+v", w.Pid, w.AdprouterBefore, w)
					}
				} else if w.NeedsPrefixMatches == nil || *w.NeedsPrefixMatches != tc.needs {
					t.Errorf("worker %d: needs_prefix_matches %v, want %v", w.Pid, w.NeedsPrefixMatches, tc.needs)
				}
			}
			if strings.Contains(out, "Warning:") || strings.Contains(out, "Traceback") {
				t.Errorf("warnings or errors in the run:\n%s", out)
			}
			t.Log(line)
		})
	}
}

// hookMpirun runs mpirun -np 1 args with exactly env and returns the
// combined output and the exit code. Unlike mpiRun it leaves the BTLs to
// Open MPI: the spawned workers are another job, which the shared-memory BTL
// cannot reach.
func hookMpirun(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	return mpirunIn(t, env, false, time.Minute, "1", args...)
}
