// Command schemagen rewrites the generated parts of the header files and
// docs from the router's option schema and the library's limits (package
// schemagen). Run from the repository root, or through go generate ./...
//
//	go run ./internal/schemagen/cmd/schemagen [-root DIR]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/adprouter/adprouter/internal/schemagen"
)

func main() {
	root := flag.String("root", ".", "the repository root")
	flag.Parse()
	written, err := schemagen.Write(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
	for _, p := range written {
		fmt.Println("schemagen: wrote", p)
	}
}
