// Package schemagen writes the parts of other languages' files that restate
// the router's option schema (router.OptionSchema) and the library's limits
// (router and capi constants): the option list and the limit #defines of
// include/adprouter.h, the typed options of include/adprouter.hpp and the
// options table of docs/configuration.md. Each part sits between a BEGIN and
// an END marker line; the rest of each file is hand-written.
//
// Run it with go generate ./... (router/schema.go carries the directive);
// TestGeneratedFilesAreCurrent fails while a file differs from what it would
// write, so that adding, removing or changing an option or a limit in one
// place and not the others fails ./build.sh test.
package schemagen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/adprouter/adprouter/internal/limits"
	"github.com/adprouter/adprouter/router"
)

// A Region is one generated part of a file.
type Region struct {
	Path  string // relative to the repository root
	Begin string // the marker line before the part (whole line, trimmed)
	End   string // the marker line after it
	// Body returns the part; file returns a file's contents as generated so
	// far (regions earlier in Regions are already applied).
	Body func(file func(path string) []byte) string
}

// Regions returns every generated part.
func Regions() []Region {
	return []Region{
		{"include/adprouter.h", "* BEGIN options (generated from router/schema.go by go generate; do not edit)",
			"* END options", static(headerOptions)},
		{"include/adprouter.h", "/* BEGIN limits (generated from the Go constants by go generate; do not edit) */",
			"/* END limits */", static(headerLimits)},
		{"include/adprouter.hpp", "// BEGIN options (generated from router/schema.go by go generate; do not edit)",
			"// END options", static(cppOptions)},
		{"docs/configuration.md", "<!-- BEGIN options (generated from router/schema.go by go generate; do not edit) -->",
			"<!-- END options -->", static(docsOptions)},
		{"python/adprouter/_consts.py", "# BEGIN constants (generated from include/adprouter.h by go generate; do not edit)",
			"# END constants", pythonConstants},
	}
}

func static(f func() string) func(func(string) []byte) string {
	return func(func(string) []byte) string { return f() }
}

// Apply returns src with r's part replaced by body, or an error when the
// markers are missing or out of order.
func Apply(src []byte, r Region, body string) ([]byte, error) {
	lines := strings.SplitAfter(string(src), "\n")
	begin, end := -1, -1
	for i, l := range lines {
		switch strings.TrimSpace(l) {
		case r.Begin:
			if begin >= 0 {
				return nil, fmt.Errorf("%s: marker %q appears twice", r.Path, r.Begin)
			}
			begin = i
		case r.End:
			if begin >= 0 && end < 0 {
				end = i
			}
		}
	}
	if begin < 0 || end < 0 {
		return nil, fmt.Errorf("%s: want a line %q followed by a line %q", r.Path, r.Begin, r.End)
	}
	var b bytes.Buffer
	for _, l := range lines[:begin+1] {
		b.WriteString(l)
	}
	b.WriteString(body)
	for _, l := range lines[end:] {
		b.WriteString(l)
	}
	return b.Bytes(), nil
}

// Generate returns the generated contents of every file with regions,
// reading the current files under root.
func Generate(root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, r := range Regions() {
		src, ok := out[r.Path]
		if !ok {
			var err error
			if src, err = os.ReadFile(filepath.Join(root, r.Path)); err != nil {
				return nil, err
			}
		}
		file := func(path string) []byte {
			if b, ok := out[path]; ok {
				return b
			}
			b, _ := os.ReadFile(filepath.Join(root, path))
			return b
		}
		next, err := Apply(src, r, r.Body(file))
		if err != nil {
			return nil, err
		}
		out[r.Path] = next
	}
	return out, nil
}

// Write generates and writes every file under root that changed; it
// returns the paths written.
func Write(root string) ([]string, error) {
	files, err := Generate(root)
	if err != nil {
		return nil, err
	}
	var written []string
	seen := map[string]bool{}
	for _, r := range Regions() {
		if seen[r.Path] {
			continue
		}
		seen[r.Path] = true
		path := filepath.Join(root, r.Path)
		old, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(old, files[r.Path]) {
			continue
		}
		if err := os.WriteFile(path, files[r.Path], 0o644); err != nil {
			return nil, err
		}
		written = append(written, r.Path)
	}
	return written, nil
}

// wrap breaks text into lines of at most width columns.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// quoted returns the values as "a" | "b" | "c".
func quoted(values []string, sep string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, sep)
}

// policies is what the option says about who reads it.
func policies(o router.OptionSpec) string {
	if len(o.Policies) == 0 {
		return "all"
	}
	p := make([]string, len(o.Policies))
	for i, x := range o.Policies {
		p[i] = string(x)
	}
	return strings.Join(p, ", ")
}

// summary is the option's type, default and allowed values in one phrase.
func summary(o router.OptionSpec) string {
	def := "(required)"
	if o.Default != "" {
		def = "[" + o.Default + "]"
		if o.Kind == router.KindEnum {
			def = fmt.Sprintf("[%q]", o.Default)
		}
	}
	switch o.Kind {
	case router.KindEnum:
		return def + " " + quoted(o.Values, " | ") + "."
	case router.KindBool:
		return def + ` "true" | "false" (or "True"/"False", "1"/"0").`
	}
	s := def + " " + o.Range
	if o.Unit != "" {
		s += " " + o.Unit
	}
	return s + "."
}

// presetText lists each preset's options per policy.
func presetText() []string {
	var out []string
	for _, name := range router.Presets() {
		var parts []string
		for _, p := range []router.Policy{router.PolicyKVCacheAware, router.PolicyDefault, router.PolicyConversation} {
			kv, err := router.PresetOptions(name, p)
			if err != nil || len(kv) == 0 {
				continue
			}
			s := make([]string, len(kv))
			for i, x := range kv {
				s[i] = x[0] + "=" + x[1]
			}
			parts = append(parts, string(p)+": "+strings.Join(s, ", "))
		}
		if len(parts) == 0 {
			parts = []string{"nothing"}
		}
		out = append(out, fmt.Sprintf("%q: %s", name, strings.Join(parts, "; ")))
	}
	return out
}

func headerOptions() string {
	var b strings.Builder
	const indent, width = 25, 76
	pad := strings.Repeat(" ", indent)
	for _, o := range router.OptionSchema() {
		text := summary(o) + " " + o.Doc
		if o.Name == "preset" {
			text += " Presets: " + strings.Join(presetText(), "; ") + "."
		}
		if len(o.Policies) > 0 {
			text += " Read by " + policies(o) + "."
		}
		for i, l := range wrap(text, width-indent) {
			if i == 0 {
				fmt.Fprintf(&b, " *   %-*s%s\n", indent-3, o.Name, l)
			} else {
				fmt.Fprintf(&b, " * %s%s\n", pad[:indent-1], l)
			}
		}
	}
	return b.String()
}

// A Limit is one #define of the header's limits block.
type Limit struct {
	Name  string
	Value int64
	Doc   string
}

// Limits are the library's bounds on its inputs, from their Go homes.
func Limits() []Limit {
	return []Limit{
		{"ADPR_MAX_OPTIONS", limits.MaxOptions, "options per adpr_router_create"},
		{"ADPR_MAX_OPTION_BYTES", limits.MaxOptionBytes, "bytes of one option key or value"},
		{"ADPR_MAX_DP_SIZE", router.MaxDPSize, "ranks (option dp_size)"},
		{"ADPR_MAX_REQUESTS", limits.MaxRequests, "requests per adpr_route batch"},
		{"ADPR_MAX_CONVERSATION_ID_BYTES", router.MaxConversationIDBytes, "bytes of a conversation id"},
		{"ADPR_PREFIX_TOKENS", router.PrefixTokens, "leading tokens the KV-aware policy groups by"},
		{"ADPR_MAX_TOKENS_PER_BLOCK", router.MaxTokensPerBlock, "option tokens_per_block"},
		{"ADPR_MAX_DEVICE_BYTES", limits.MaxDeviceBytes, "bytes of an NVML device selector"},
		{"ADPR_MESSAGE_MAX", limits.MessageMax, "bytes of the longest error message or reason, NUL included"},
	}
}

func headerLimits() string {
	var b strings.Builder
	for _, l := range Limits() {
		fmt.Fprintf(&b, "#define %-31s %-8d /* %s */\n", l.Name, l.Value, l.Doc)
	}
	return b.String()
}

// cppName is the C++ identifier of an enum value.
func cppName(value, typ string) string {
	v := strings.ReplaceAll(value, "+", "_and_")
	switch v {
	case "default", "delete", "new", "and", "or", "not":
		v += "_" + typ
	}
	return v
}

// cppType is the C++ enum type of an enum option.
func cppType(o router.OptionSpec) string {
	if o.Name == "new_conv_placement" {
		return "placement"
	}
	return o.Name
}

func cppOptions() string {
	var b strings.Builder
	schema := router.OptionSchema()
	for _, o := range schema {
		if o.Kind != router.KindEnum {
			continue
		}
		t := cppType(o)
		names := make([]string, len(o.Values))
		for i, v := range o.Values {
			names[i] = cppName(v, t)
		}
		fmt.Fprintf(&b, "enum class %s { %s };\n", t, strings.Join(names, ", "))
		fmt.Fprintf(&b, "inline const char *to_text(%s v) noexcept {\n    switch (v) {\n", t)
		for i, v := range o.Values {
			fmt.Fprintf(&b, "    case %s::%s: return %q;\n", t, names[i], v)
		}
		b.WriteString("    }\n    return \"\";\n}\n")
	}
	b.WriteString(`
// Router options: one field per option of the library (adprouter.h lists
// them with their defaults and ranges). dp_size is required; every optional
// left empty is not passed, so the library's default applies.
struct options {
`)
	for _, o := range schema {
		first := strings.SplitAfter(o.Doc, ". ")[0]
		for _, l := range wrap(strings.TrimSpace(first), 70) {
			fmt.Fprintf(&b, "    // %s\n", l)
		}
		if o.Name == "dp_size" {
			b.WriteString("    int32_t dp_size = 0;\n")
			continue
		}
		fmt.Fprintf(&b, "    std::optional<%s> %s;\n", cppFieldType(o), o.Name)
	}
	b.WriteString(`
    // The options as adpr_option key/value text. Numbers are written in the
    // shortest form that parses back to the same value (std::to_chars), so a
    // double reaches the library exactly.
    std::vector<std::pair<std::string, std::string>> to_text() const {
        std::vector<std::pair<std::string, std::string>> kv;
        kv.emplace_back("dp_size", num(dp_size));
`)
	for _, o := range schema {
		if o.Name == "dp_size" {
			continue
		}
		var val string
		switch o.Kind {
		case router.KindEnum:
			val = "adprouter::to_text(*" + o.Name + ")"
		case router.KindBool:
			val = "*" + o.Name + ` ? "true" : "false"`
		default:
			val = "num(*" + o.Name + ")"
		}
		fmt.Fprintf(&b, "        if (%s) kv.emplace_back(%q, %s);\n", o.Name, o.Name, val)
	}
	b.WriteString(`        return kv;
    }

private:
    template <class N>
    static std::string num(N v) {
        char buf[64];
        auto r = std::to_chars(buf, buf + sizeof buf, v);
        return std::string(buf, r.ptr);
    }
};
`)
	return b.String()
}

func cppFieldType(o router.OptionSpec) string {
	switch o.Kind {
	case router.KindEnum:
		return "adprouter::" + cppType(o)
	case router.KindInt:
		return "int32_t"
	case router.KindInt64:
		return "int64_t"
	case router.KindFloat:
		return "double"
	case router.KindBool:
		return "bool"
	}
	panic("unknown option kind " + string(o.Kind))
}

func docsOptions() string {
	var b strings.Builder
	b.WriteString("| option | default | allowed | read by | what it does |\n|---|---|---|---|---|\n")
	for _, o := range router.OptionSchema() {
		def := "required"
		if o.Default != "" {
			def = "`" + o.Default + "`"
		}
		var allowed string
		switch o.Kind {
		case router.KindEnum:
			q := make([]string, len(o.Values))
			for i, v := range o.Values {
				q[i] = "`" + v + "`"
			}
			allowed = strings.Join(q, ", ")
		case router.KindBool:
			allowed = "`true`, `false`"
		default:
			allowed = o.Range
			if o.Unit != "" {
				allowed += " " + o.Unit
			}
			if o.Kind == router.KindFloat {
				allowed += " (decimal)"
			}
		}
		doc := o.Doc
		if o.Name == "preset" {
			doc += " " + strings.Join(presetText(), "; ") + "."
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", o.Name, def, allowed, policies(o),
			strings.ReplaceAll(doc, "|", `\|`))
	}
	return b.String()
}

// pythonConstants is python/adprouter/_consts.py's body: every integer
// #define of the header (status codes, limits, reasons, enum values, the
// ABI version), so the binding reads them from the header instead of
// restating them.
func pythonConstants(file func(string) []byte) string {
	var b strings.Builder
	for _, l := range strings.Split(string(file("include/adprouter.h")), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "#define" || !strings.HasPrefix(f[1], "ADPR_") {
			continue
		}
		v := strings.TrimSuffix(strings.Trim(f[2], "()"), "u")
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			continue // strings (ADPR_VERSION), include guards
		}
		fmt.Fprintf(&b, "%s = %s\n", strings.TrimPrefix(f[1], "ADPR_"), v)
	}
	return b.String()
}
