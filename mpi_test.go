// The library under MPI, the way an ADP engine runs it: examples/mpi/adp_sim.c
// on 4 ranks (mpirun --oversubscribe, root allowed), every policy and option,
// digests of every decision and of the router state compared across ranks
// each iteration; and a rank fed divergent inputs must be caught by that
// check. Skipped under -short and, outside CI, when OpenMPI is not installed
// ("MPI not installed: skipped"); under CI (CI non-empty) a missing mpicc or
// mpirun is a failure, since .ci/run installs OpenMPI.
package adprouter_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const mpiRanks = "4"

// mpiTool returns the path of an MPI tool; when it is missing the test is
// skipped, or fails under CI.
func mpiTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found: CI must install OpenMPI (.ci/run installs openmpi-bin libopenmpi-dev)", name)
		}
		t.Skipf("MPI not installed: skipped (%s not found; apt-get install openmpi-bin libopenmpi-dev)", name)
	}
	return p
}

// mpiSim compiles examples/mpi/adp_sim.c with mpicc against build/ and
// include/ (rpath to build/) into a temporary directory and returns the binary.
func mpiSim(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("MPI end-to-end test: skipped with -short")
	}
	mpicc := mpiTool(t, "mpicc") // before the build: a skip should cost nothing
	mpiTool(t, "mpirun")
	lib := library(t) // router_test.go: ./build.sh build, once per test binary
	dir := filepath.Dir(lib)
	inc, err := filepath.Abs("include")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "adp_sim")
	out, err := exec.Command(mpicc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I"+inc,
		"-o", bin, "examples/mpi/adp_sim.c", "-L"+dir, "-ladprouter", "-Wl,-rpath,"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("mpicc examples/mpi/adp_sim.c: %v\n%s", err, out)
	}
	return bin
}

// mpiRun runs bin on np ranks with mpirun options that work in a plain
// container as root on few cores (the same as examples/mpi/run.sh), and
// returns the combined output and the exit code.
func mpiRun(t *testing.T, np, bin string, args ...string) (string, int) {
	t.Helper()
	return mpirunIn(t, os.Environ(), true, 3*time.Minute, np, append([]string{bin}, args...)...)
}

// mpirunIn runs mpirun -np np args with env and what Open MPI needs in a
// plain container as root on few cores (no CMA, no remote agent on a single
// host; sharedMemory: the self and shared-memory BTLs only, for a job whose
// ranks are all its own), killing it after limit (a collective deadlocked);
// it returns the combined output and the exit code.
func mpirunIn(t *testing.T, env []string, sharedMemory bool, limit time.Duration, np string,
	args ...string) (string, int) {
	t.Helper()
	mpirun := mpiTool(t, "mpirun")
	var flags []string
	if v, _ := exec.Command(mpirun, "--version").CombinedOutput(); bytes.Contains(v, []byte("Open MPI")) {
		flags = []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none"}
		if sharedMemory {
			flags = append(flags, "--mca", "btl", "self,vader")
		}
		if os.Getenv("OMPI_MCA_btl_vader_single_copy_mechanism") == "" {
			env = append(env, "OMPI_MCA_btl_vader_single_copy_mechanism=none") // no CMA in containers
		}
		_, sshErr := exec.LookPath("ssh")
		_, rshErr := exec.LookPath("rsh")
		if sshErr != nil && rshErr != nil && os.Getenv("OMPI_MCA_plm_rsh_agent") == "" {
			env = append(env, "OMPI_MCA_plm_rsh_agent=false") // single host: no remote agent needed
		}
	}
	argv := append(append(flags, "-np", np), args...)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, argv...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("mpirun %s: %v", strings.Join(argv, " "), time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("mpirun %s: timed out after %v (a collective deadlocked?)\n%s", strings.Join(argv, " "), limit, out.String())
	}
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("mpirun %s: %v\n%s", strings.Join(argv, " "), err, out.String())
		}
		code = ee.ExitCode()
	}
	return out.String(), code
}

var (
	mpiConfigsMu    sync.Mutex
	mpiConfigsNames []string
)

// mpiConfigs lists the simulation's configurations (adp_sim --list, once).
func mpiConfigs(t *testing.T, bin string) []string {
	t.Helper()
	mpiConfigsMu.Lock()
	defer mpiConfigsMu.Unlock()
	if mpiConfigsNames != nil {
		return mpiConfigsNames
	}
	out, code := mpiRun(t, "1", bin, "--list")
	if code != 0 {
		t.Fatalf("adp_sim --list: exit %d\n%s", code, out)
	}
	names := strings.Fields(out)
	if len(names) < 8 {
		t.Fatalf("adp_sim --list: %d configurations, want every policy and option (>= 8):\n%s", len(names), out)
	}
	mpiConfigsNames = names
	return names
}

// mpiReport keeps the simulation's own lines, not mpirun's banner about a
// non-zero exit.
func mpiReport(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "[") || strings.HasPrefix(l, "adp_sim") || strings.HasPrefix(l, "ALL OK") ||
			strings.HasPrefix(l, "DIVERGENCE") || strings.HasPrefix(l, "FAIL") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

var mpiOKLine = regexp.MustCompile(`(?m)^\[(\S+)\] OK iterations=(\d+) requests=(\d+) routed=(\d+) unassigned=(\d+) .*decision_digest=(0x[0-9a-f]{16}) state_digest=(0x[0-9a-f]{16})`)

// Every configuration runs 300 iterations on 4 ranks with every rank agreeing
// on every decision and router state, and a second run (new processes)
// reproduces the same digests.
func TestMPISimulation(t *testing.T) {
	bin := mpiSim(t)
	configs := mpiConfigs(t, bin)
	digests := map[string]string{}
	for run := range 2 {
		out, code := mpiRun(t, mpiRanks, bin, "--iters", "300")
		if code != 0 {
			t.Fatalf("run %d: exit %d, want 0\n%s", run, code, out)
		}
		if !strings.Contains(out, "ALL OK: "+strconv.Itoa(len(configs))+" configurations, "+mpiRanks+" ranks") {
			t.Fatalf("run %d: no ALL OK line for %d configurations:\n%s", run, len(configs), out)
		}
		seen := map[string]bool{}
		var unassigned int
		for _, m := range mpiOKLine.FindAllStringSubmatch(out, -1) {
			name := m[1]
			seen[name] = true
			if m[2] != "300" {
				t.Errorf("run %d [%s]: iterations=%s, want 300", run, name, m[2])
			}
			if routed, _ := strconv.Atoi(m[4]); routed == 0 {
				t.Errorf("run %d [%s]: nothing routed", run, name)
			}
			u, _ := strconv.Atoi(m[5])
			unassigned += u
			d := m[6] + " " + m[7]
			if run == 0 {
				digests[name] = d
			} else if digests[name] != d {
				t.Errorf("[%s]: digests %s in run 0, %s in run 1: not reproducible", name, digests[name], d)
			}
		}
		for _, c := range configs {
			if !seen[c] {
				t.Errorf("run %d: configuration %s has no OK line", run, c)
			}
		}
		if unassigned == 0 {
			t.Errorf("run %d: no request was ever unassigned: the requeue path went untested", run)
		}
		if run == 0 {
			t.Logf("normal run:\n%s", mpiReport(out))
		}
	}
}

// One rank perturbing its own copy of the inputs is caught by the digest
// check (naming the iteration and the rank) and fails the run with exit
// status 3, in every configuration.
func TestMPIDivergenceDetected(t *testing.T) {
	bin := mpiSim(t)
	configs := mpiConfigs(t, bin)
	line := regexp.MustCompile(`(?m)^\[(\S+)\] DIVERGENCE at iteration (\d+): rank 2 disagrees with the majority$`)
	summary := regexp.MustCompile(`(?m)^DIVERGENCE DETECTED in all (\d+) configurations`)
	for _, tc := range []struct {
		kind  string
		first int  // iteration the perturbation starts: detected there or later
		all   bool // runs in every configuration
	}{
		{"state", 40, true},  // routes with its local, un-gathered rank states
		{"order", 40, true},  // routes the batch in a different order
		{"match", 40, false}, // uses only its own match lengths (prefix_source probe only)
		{"config", 0, true},  // created with a different option
	} {
		t.Run(tc.kind, func(t *testing.T) {
			out, code := mpiRun(t, mpiRanks, bin, "--iters", "60", "--diverge="+tc.kind)
			if code != 3 {
				t.Fatalf("exit %d, want 3 (divergence detected)\n%s", code, out)
			}
			m := summary.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no DIVERGENCE DETECTED line:\n%s", out)
			}
			if mpiOKLine.MatchString(out) || strings.Contains(out, "UNDETECTED") {
				t.Fatalf("a configuration passed despite the divergence:\n%s", out)
			}
			n, _ := strconv.Atoi(m[1])
			found := map[string]int{}
			for _, m := range line.FindAllStringSubmatch(out, -1) {
				it, _ := strconv.Atoi(m[2])
				found[m[1]] = it
			}
			want := "at least 1"
			if tc.all {
				want = "all " + strconv.Itoa(len(configs))
			}
			if len(found) != n || n == 0 || (tc.all && n != len(configs)) {
				t.Fatalf("%d configurations report a divergence naming iteration and rank 2, the summary says %d, want %s:\n%s",
					len(found), n, want, out)
			}
			for c, it := range found {
				if it < tc.first {
					t.Errorf("[%s]: divergence reported at iteration %d, before the perturbation started (%d)", c, it, tc.first)
				}
			}
			if !strings.Contains(out, "digest DIFFERS") {
				t.Fatalf("no differing digest shown:\n%s", out)
			}
			t.Logf("--diverge=%s:\n%s", tc.kind, mpiReport(out))
		})
	}
}

var mpiTrtllmLine = regexp.MustCompile(`(?m)^\[(\S+)\] OK iterations=(\d+) requests=(\d+) routed=(\d+) carried=(\d+) requeued=(\d+) digest=(0x[0-9a-f]{16})$`)

// debianPython returns Debian's interpreter, for which python3-mpi4py is
// built, once it imports modules (comma-separated) and mpirun is there; it
// skips the test outside CI when they are missing (a failure under CI,
// which must install the Debian packages pkgs).
func debianPython(t *testing.T, modules, pkgs string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("MPI end-to-end test: skipped with -short")
	}
	const py = "/usr/bin/python3" // python3-mpi4py is built for Debian's interpreter
	if out, err := exec.Command(py, "-c", "import "+modules).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s -c 'import %s': %v\n%s\nCI must install %s (.ci/run does)", py, modules, err, out, pkgs)
		}
		t.Skipf("%s not importable by %s: skipped (apt-get install %s)", modules, py, pkgs)
	}
	mpiTool(t, "mpirun")
	return py
}

// mpiPython returns debianPython with PYTHONPATH and ADPROUTER_LIBRARY set
// for python/tests/mpi_trtllm.py.
func mpiPython(t *testing.T) string {
	t.Helper()
	py := debianPython(t, "mpi4py", "python3-mpi4py")
	lib, err := filepath.Abs(library(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", "python")
	t.Setenv("ADPROUTER_LIBRARY", lib)
	return py
}

// adprouter.trtllm on 4 MPI ranks the way TensorRT-LLM's PyExecutor runs it
// (python/tests/mpi_trtllm.py under Debian's /usr/bin/python3 and its
// python3-mpi4py): every policy and option, each rank with its own fake KV
// cache and active requests, real allgathers of rank states and prefix
// matches; the ranks agree every iteration, every request is admitted by
// exactly one rank, none is lost, and a second run reproduces the digests.
// The overcommitted configurations ("+overcommit") carry requests over; their
// "+overcommit+requeue" twins give the router the executor, which takes
// them back into its waiting queue instead: they carry none. With
// TensorRT-LLM's admission capacity nothing is left over at all, except
// under the recommended preset, whose score may leave a request for a full
// rank holding its prompt when the requests take every slot.
// Skipped outside CI when mpi4py or OpenMPI is missing; a failure under CI.
func TestMPITrtllm(t *testing.T) {
	py := mpiPython(t)
	digests := map[string]string{}
	for run := range 2 {
		out, code := mpiRun(t, mpiRanks, py, "python/tests/mpi_trtllm.py", "--iters", "40")
		if code != 0 {
			t.Fatalf("run %d: exit %d, want 0\n%s", run, code, out)
		}
		lines := mpiTrtllmLine.FindAllStringSubmatch(out, -1)
		if len(lines) < 13 || !strings.Contains(out, "ALL OK: "+strconv.Itoa(len(lines))+" configurations, "+mpiRanks+" ranks") {
			t.Fatalf("run %d: want an OK line for each of >= 13 configurations and an ALL OK line:\n%s", run, out)
		}
		byName := map[string][]string{}
		for _, m := range lines {
			byName[m[1]] = m
		}
		overcommitted := 0
		for _, m := range lines {
			name := m[1]
			if m[3] != m[4] || m[3] == "0" {
				t.Errorf("run %d [%s]: requests=%s routed=%s, want every request routed once", run, name, m[3], m[4])
			}
			carried, _ := strconv.Atoi(m[5])
			requeued, _ := strconv.Atoi(m[6])
			switch {
			case strings.HasSuffix(name, "+overcommit"):
				overcommitted++
				if carried == 0 || requeued != 0 {
					t.Errorf("run %d [%s]: carried=%d requeued=%d, want requests carried over (no executor to requeue to)",
						run, name, carried, requeued)
				}
				twin := byName[name+"+requeue"]
				if twin == nil {
					t.Errorf("run %d [%s]: no OK line of its twin %s+requeue", run, name, name)
				} else if twin[3] != m[3] {
					t.Errorf("run %d [%s+requeue]: requests=%s, its twin had %s", run, name, twin[3], m[3])
				}
			case strings.HasSuffix(name, "+overcommit+requeue"):
				if carried != 0 || requeued == 0 {
					t.Errorf("run %d [%s]: carried=%d requeued=%d, want every left-over request put back in the waiting queue",
						run, name, carried, requeued)
				}
			case strings.HasSuffix(name, "preset=recommended"):
				// score="ttft" may leave a request for a full rank holding its
				// prompt when the requests take every slot (docs/ROUTING.md, "Past
				// the request slots"); with no executor to requeue to, it is
				// carried (fake_executor checks that every request is admitted).
				if requeued != 0 {
					t.Errorf("run %d [%s]: requeued=%d, want 0 (no executor to requeue to)", run, name, requeued)
				}
			default: // TensorRT-LLM's admission capacity: nothing left over
				if carried != 0 || requeued != 0 {
					t.Errorf("run %d [%s]: carried=%d requeued=%d, want 0 within TensorRT-LLM's admission capacity",
						run, name, carried, requeued)
				}
			}
			if run == 0 {
				digests[name] = m[7]
			} else if digests[name] != m[7] {
				t.Errorf("[%s]: digest %s in run 0, %s in run 1: not reproducible", name, digests[name], m[7])
			}
		}
		if overcommitted < 3 {
			t.Errorf("run %d: %d overcommitted configurations, want every policy's (3): the carry-over and requeue went untested",
				run, overcommitted)
		}
		if run == 0 {
			t.Logf("mpi_trtllm.py:\n%s", mpiReport(out))
		}
	}
}

var (
	mpiCheckRanksRefused = regexp.MustCompile(`(?m)^\[check_ranks mismatch\] rank (\d+) (\S+) allgathers=(\d+) fingerprint=([0-9a-f]{16}): (.*)$`)
	mpiCheckRanksRouted  = regexp.MustCompile(`(?m)^\[check_ranks match\] OK iterations=3 routed=(\d+) allgathers=2,3,4 fingerprint=([0-9a-f]{16})$`)
)

// The check_ranks option on 4 MPI ranks (python/tests/mpi_trtllm.py
// --check-ranks): with rank 1 given another option every rank raises
// adprouter.ConfigError at its first gather, after the one allgather of
// fingerprints (no rank hangs: mpiRun times out otherwise), naming rank 1's
// fingerprint and the other three's; with the same options the ranks route
// alike and only the first gather makes the extra allgather.
func TestMPICheckRanks(t *testing.T) {
	py := mpiPython(t)
	out, code := mpiRun(t, mpiRanks, py, "python/tests/mpi_trtllm.py", "--check-ranks")
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, out)
	}
	refused := mpiCheckRanksRefused.FindAllStringSubmatch(out, -1)
	if len(refused) != 4 {
		t.Fatalf("%d [check_ranks mismatch] lines, want one per rank (4):\n%s", len(refused), out)
	}
	prints := map[string]string{}
	for i, m := range refused {
		if m[1] != strconv.Itoa(i) || m[2] != "ConfigError" || m[3] != "1" {
			t.Errorf("line %d: rank %s %s after %s allgathers, want rank %d ConfigError after 1", i, m[1], m[2], m[3], i)
		}
		prints[m[1]] = m[4]
	}
	odd, rest := prints["1"], prints["0"]
	if odd == rest || prints["2"] != rest || prints["3"] != rest {
		t.Fatalf("fingerprints %v, want rank 1's alone different", prints)
	}
	for _, m := range refused {
		if !strings.Contains(m[5], odd+": ranks [1]") || !strings.Contains(m[5], rest+": ranks [0, 2, 3]") {
			t.Errorf("rank %s's error does not name both fingerprints and their ranks: %s", m[1], m[5])
		}
	}
	ok := mpiCheckRanksRouted.FindStringSubmatch(out)
	if ok == nil || ok[1] != "15" || ok[2] != rest {
		t.Fatalf("want a [check_ranks match] OK line: 15 requests routed, allgathers 2,3,4, fingerprint %s:\n%s", rest, out)
	}
	if !strings.Contains(out, "CHECK_RANKS OK: "+mpiRanks+" ranks") || strings.Contains(out, "FAIL") {
		t.Fatalf("no CHECK_RANKS OK line, or a FAIL line:\n%s", out)
	}
	t.Logf("mpi_trtllm.py --check-ranks:\n%s", out)
}
