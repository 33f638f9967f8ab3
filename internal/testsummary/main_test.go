package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

const stream = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestSlow"}
{"Action":"pass","Package":"example.com/a","Test":"TestSlow","Elapsed":7.2}
{"Action":"run","Package":"example.com/a","Test":"TestMPI"}
{"Action":"output","Package":"example.com/a","Test":"TestMPI","Output":"=== RUN   TestMPI\n"}
{"Action":"output","Package":"example.com/a","Test":"TestMPI","Output":"    mpi_test.go:12: mpi4py is not installed for /usr/bin/python3\n"}
{"Action":"output","Package":"example.com/a","Test":"TestMPI","Output":"--- SKIP: TestMPI (0.00s)\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestMPI"}
{"Action":"pass","Package":"example.com/a","Elapsed":9.1}
{"Action":"skip","Package":"example.com/empty"}
`

func run(in string) (string, bool) {
	var out bytes.Buffer
	s := &summary{out: &out, output: map[key][]string{}, started: map[string]bool{}}
	if err := s.read(strings.NewReader(in)); err != nil {
		panic(err)
	}
	ok := s.finish()
	return out.String(), ok
}

func TestPassingRunListsSkips(t *testing.T) {
	out, ok := run(stream)
	assert.True(t, ok, out)
	assert.Contains(t, out, "ok     example.com/a")
	assert.Contains(t, out, "TestSlow")
	assert.Contains(t, out, "skipped example.com/a TestMPI: mpi_test.go:12: mpi4py is not installed for /usr/bin/python3")
	assert.Contains(t, out, "(no test files)")
}

func TestFailuresFail(t *testing.T) {
	failing := stream + `{"Action":"start","Package":"example.com/b"}
{"Action":"run","Package":"example.com/b","Test":"TestBad"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"    b_test.go:3: got 1, want 2\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestBad","Elapsed":0.1}
{"Action":"fail","Package":"example.com/b","Elapsed":0.2}
`
	out, ok := run(failing)
	assert.False(t, ok)
	assert.Contains(t, out, "--- FAIL example.com/b TestBad")
	assert.Contains(t, out, "got 1, want 2")
	assert.Contains(t, out, "1 tests failed")

	// A package that started and never finished (the run was killed).
	out, ok = run(`{"Action":"start","Package":"example.com/c"}` + "\n")
	assert.False(t, ok)
	assert.Contains(t, out, "no result for example.com/c")

	// A build error printed outside test2json.
	out, ok = run("# example.com/d\nd.go:1: syntax error\n")
	assert.False(t, ok)
	assert.Contains(t, out, "syntax error")
}
