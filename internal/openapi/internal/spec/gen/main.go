// Command gen writes sombus's OpenAPI document (run by go generate in
// internal/openapi).
package main

import (
	"flag"
	"log"
	"os"

	"github.com/sombus/sombus/internal/openapi/internal/spec"
)

func main() {
	out := flag.String("o", "openapi.json", "file to write")
	flag.Parse()
	b, err := spec.JSON()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil { //nolint:gosec // a document committed to the repository, world-readable on purpose
		log.Fatal(err)
	}
}
