//go:build figures

package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var (
	figuresDir   = flag.String("figures", "", "TestDocFigures: run routing-quality.md's simulator commands, writing their output under this `directory`")
	figuresMatch = flag.String("figures-match", "", "TestDocFigures: only the commands whose file:line or arguments contain this `text`")
)

// figuresDoc is the page of routing-quality figures, each with the
// commands it comes from. (The other docs' commands are examples: a trace
// of your own, say.)
const figuresDoc = "docs/routing-quality.md"

// TestDocFigures re-runs the commands figuresDoc's figures come from (all
// of them take hours on 2 cores, hence the build tag). Each command's output
// goes to DIR/FILE-LINE.txt, headed by the command. The commands run from
// DIR/work, where cmd/, held-out/ and slices/ (those there are) link to
// those of the repository root, so they read the paths the page gives and
// write their files (-json eval.json, -gen-trace mix.jsonl) there.
// The commands run in the page's order: one may read what the one before
// it in its block wrote.
// Exit status 3 (goals missed) is a result, not a failure.
//
//	go test -tags figures -timeout 0 ./cmd/adprouter-sim -run TestDocFigures -figures /tmp/figures -figures-match "eval-grid random"
func TestDocFigures(t *testing.T) {
	if *figuresDir == "" {
		t.Fatal("give -figures DIR, the directory for the commands' output")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := filepath.Abs(*figuresDir)
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(out, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"cmd", "held-out", "slices"} {
		link := filepath.Join(work, dir)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
			continue
		}
		if err := os.Symlink(filepath.Join(root, dir), link); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(out, "adprouter-sim")
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	ran := 0
	for _, d := range allDocCommands(t) {
		if d.file != figuresDoc || *figuresMatch != "" && !strings.Contains(d.String()+" "+strings.Join(d.args, " "), *figuresMatch) {
			continue
		}
		name := filepath.Join(out, fmt.Sprintf("%s-%d.txt", strings.ReplaceAll(d.file, "/", "_"), d.line))
		var buf bytes.Buffer
		fmt.Fprintf(&buf, "$ adprouter-sim %s   # %v\n", strings.Join(d.args, " "), d)
		cmd := exec.Command(bin, d.args...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = work, &buf, &buf
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 3) {
			t.Errorf("%v: adprouter-sim %s: %v (output in %s)", d, strings.Join(d.args, " "), err, name)
		}
		if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		ran++
		t.Logf("%v: %s", d, name)
	}
	if ran == 0 {
		t.Errorf("no command matches %q", *figuresMatch)
	}
}
