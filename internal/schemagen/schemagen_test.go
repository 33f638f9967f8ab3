package schemagen

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/adprouter/adprouter/router"
)

const root = "../.."

// The generated parts of the header files and docs are what the schema and
// the limits say now: an option or a limit changed in one place and not
// regenerated fails here.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := Generate(root)
	require.NoError(t, err)
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(root, path))
		require.NoError(t, err)
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./... (or go run ./internal/schemagen/cmd/schemagen)", path)
		}
	}
}

// Every option of the schema appears in every generated part, by name.
func TestEveryOptionGenerated(t *testing.T) {
	for _, r := range Regions() {
		if strings.Contains(r.Begin, "limits") {
			continue
		}
		if strings.Contains(r.Begin, "constants") {
			continue
		}
		body := r.Body(func(string) []byte { return nil })
		for _, o := range router.OptionSchema() {
			assert.Contains(t, body, o.Name, "%s lacks option %s", r.Path, o.Name)
		}
	}
}

func TestApplyMarkers(t *testing.T) {
	r := Region{Path: "x", Begin: "// B", End: "// E"}
	got, err := Apply([]byte("a\n  // B\nold\nold\n// E\nz\n"), r, "new\n")
	require.NoError(t, err)
	assert.Equal(t, "a\n  // B\nnew\n// E\nz\n", string(got))
	_, err = Apply([]byte("a\n// E\n"), r, "")
	assert.ErrorContains(t, err, "want a line")
	_, err = Apply([]byte("// B\n// B\n// E\n"), r, "")
	assert.ErrorContains(t, err, "twice")
}
