package adprouter_test

// Every code example in the README and docs/ runs as written: each Python
// block in a fresh interpreter, each C and C++ block compiled with -Wall
// -Wextra -Werror against the header and the library, then run. A block
// whose fence says "python no-run" (code that needs TensorRT-LLM or a GPU,
// say) is only parsed; shell, text and other blocks are documentation.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// docFiles are the documents whose examples must run.
func docFiles(t *testing.T) []string {
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md", "examples/mpi/README.md", "cmd/adprouter-sim/README.md"}, files...)
}

// A block is one fenced code block.
type block struct {
	file, info, code string
	line             int
}

func (b block) String() string { return fmt.Sprintf("%s:%d (%s)", b.file, b.line, b.info) }

// codeBlocks returns the fenced blocks of a Markdown file (``` fences at
// any indentation; the info string is the text after the fence).
func codeBlocks(file string, text string) []block {
	var out []block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "```") {
			continue
		}
		b := block{file: file, info: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: i + 1}
		indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
		var code []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			code = append(code, strings.TrimPrefix(lines[i], strings.Repeat(" ", indent)))
		}
		b.code = strings.Join(code, "\n") + "\n"
		out = append(out, b)
	}
	return out
}

func TestCodeBlocksParse(t *testing.T) {
	text := "x\n```python\nprint(1)\n```\n  ```c\n  int main(void) { return 0; }\n  ```\n"
	got := codeBlocks("f.md", text)
	if len(got) != 2 || got[0].info != "python" || got[0].code != "print(1)\n" || got[1].info != "c" ||
		got[1].code != "int main(void) { return 0; }\n" || got[1].line != 5 {
		t.Fatalf("codeBlocks = %+v", got)
	}
}

func TestDocExamples(t *testing.T) {
	lib := library(t)
	py := need(t, "python3")
	dir := t.TempDir()
	ran := map[string]int{}
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for k, b := range codeBlocks(file, string(text)) {
			lang, rest, _ := strings.Cut(b.info, " ")
			noRun := strings.Contains(rest, "no-run")
			src := filepath.Join(dir, fmt.Sprintf("%s-%d", strings.ReplaceAll(file, "/", "_"), k))
			switch lang {
			case "python":
				if err := os.WriteFile(src+".py", []byte(b.code), 0o644); err != nil {
					t.Fatal(err)
				}
				if noRun {
					runDoc(t, b, nil, py, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())", src+".py")
					ran["python (parsed)"]++
					continue
				}
				runDoc(t, b, []string{"PYTHONPATH=python", "ADPROUTER_LIBRARY=" + lib}, py, src+".py")
				ran["python"]++
			case "c", "cpp", "c++":
				if noRun {
					continue
				}
				compiler, std, ext := need(t, "gcc"), "-std=c11", ".c"
				if lang != "c" {
					compiler, std, ext = need(t, "g++"), "-std=c++17", ".cpp"
				}
				if err := os.WriteFile(src+ext, []byte(b.code), 0o644); err != nil {
					t.Fatal(err)
				}
				libdir := filepath.Dir(lib)
				if runDoc(t, b, nil, compiler, std, "-Wall", "-Wextra", "-Werror", "-Iinclude", "-o", src, src+ext,
					"-L"+libdir, "-ladprouter", "-Wl,-rpath,"+libdir) {
					runDoc(t, b, nil, src)
				}
				ran[lang]++
			}
		}
	}
	t.Logf("ran %v", ran)
	if ran["python"] < 10 || ran["c"] < 1 || ran["cpp"]+ran["c++"] < 1 {
		t.Errorf("ran %v: want the guides' examples (10+ Python, C and C++ blocks)", ran)
	}
}

// runDoc runs one step of block b, failing the test with the block's place
// and the command's output; it reports whether the step succeeded.
func runDoc(t *testing.T, b block, env []string, name string, args ...string) bool {
	t.Helper()
	out, err := command(env, name, args...)
	if err != nil {
		t.Errorf("%s: %s %s: %v\n%s", b, name, strings.Join(args, " "), err, out)
	}
	return err == nil
}

// command runs name with args (and env added to the environment) and
// returns its combined output.
func command(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
