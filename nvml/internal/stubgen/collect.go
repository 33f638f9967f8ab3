package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// ReturnKind says what a stubbed function returns, which decides what its
// stub returns when the real function cannot be found.
type ReturnKind int

const (
	// ReturnStatus is nvmlReturn_t: the stub returns an NVML error code.
	ReturnStatus ReturnKind = iota
	// ReturnString is const char*: the stub returns a static message.
	ReturnString
)

// Symbol is one C function that go-nvml calls.
type Symbol struct {
	Name   string     // the C function name, e.g. "nvmlInit_v2"
	Return ReturnKind // what it returns
}

var (
	blockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	lineComment  = regexp.MustCompile(`//[^\n]*`)
	deprecated   = regexp.MustCompile(`\bDEPRECATED\s*\([^)]*\)`)
	declName     = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*\($`)
	spaces       = regexp.MustCompile(`\s+`)
)

// ParseHeader returns the return type, normalised ("nvmlReturn_t",
// "const char*"), of every function nvml.h declares, keyed by name. It relies
// on the header's convention that every exported function is declared with
// the DECLDIR macro; preprocessor conditionals are ignored, so functions of
// every branch are included.
func ParseHeader(src string) (map[string]string, error) {
	src = blockComment.ReplaceAllString(src, " ")
	src = lineComment.ReplaceAllString(src, "")
	decls := make(map[string]string)
	for _, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || !strings.Contains(line, "DECLDIR") {
			continue
		}
		line = deprecated.ReplaceAllString(line, "")
		paren := strings.IndexByte(line, '(')
		if paren < 0 {
			return nil, fmt.Errorf("nvml.h: DECLDIR declaration without a parameter list: %q", line)
		}
		head := line[:paren+1]
		m := declName.FindStringSubmatchIndex(head)
		if m == nil {
			return nil, fmt.Errorf("nvml.h: cannot find the function name in %q", line)
		}
		name := head[m[2]:m[3]]
		ret := strings.Replace(head[:m[2]], "DECLDIR", " ", 1)
		ret = strings.TrimSpace(spaces.ReplaceAllString(ret, " "))
		ret = strings.ReplaceAll(ret, " *", "*")
		if prev, ok := decls[name]; ok && prev != ret {
			return nil, fmt.Errorf("nvml.h: %s declared twice with different return types %q and %q", name, prev, ret)
		}
		decls[name] = ret
	}
	if len(decls) == 0 {
		return nil, fmt.Errorf("nvml.h: no DECLDIR function declarations found; has the header's layout changed?")
	}
	return decls, nil
}

// ReferencedCalls returns the sorted names of the nvml* C functions the Go
// files (tests excluded) in dir call through cgo, that is every call C.nvmlX(...).
// Conversions such as C.nvmlReturn_t(x) are included too; Collect drops them
// by keeping only names that nvml.h declares as functions.
func ReferencedCalls(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	seen := make(map[string]bool)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "C" && strings.HasPrefix(sel.Sel.Name, "nvml") {
				seen[sel.Sel.Name] = true
			}
			return true
		})
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Collect returns, sorted by name, every function declared in dir/nvml.h
// that the Go code in dir calls. It fails when a called function has a
// return type the stubs cannot fake, so that a go-nvml upgrade that adds one
// is noticed at generation time rather than at run time.
func Collect(dir string) ([]Symbol, error) {
	hdr, err := os.ReadFile(filepath.Join(dir, "nvml.h"))
	if err != nil {
		return nil, err
	}
	decls, err := ParseHeader(string(hdr))
	if err != nil {
		return nil, err
	}
	calls, err := ReferencedCalls(dir)
	if err != nil {
		return nil, err
	}
	var syms []Symbol
	for _, name := range calls {
		ret, ok := decls[name]
		if !ok {
			continue // a type conversion such as C.nvmlReturn_t(x)
		}
		var kind ReturnKind
		switch ret {
		case "nvmlReturn_t":
			kind = ReturnStatus
		case "const char*":
			kind = ReturnString
		default:
			return nil, fmt.Errorf("%s returns %q; stubs can only fake nvmlReturn_t and const char*", name, ret)
		}
		syms = append(syms, Symbol{Name: name, Return: kind})
	}
	if len(syms) == 0 {
		return nil, fmt.Errorf("%s: no cgo calls of functions declared in nvml.h found", dir)
	}
	return syms, nil
}
