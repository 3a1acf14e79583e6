package openapi_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// citations are names of documents outside the repository. The repository
// stands alone: its code, docs and OpenAPI text say what those documents
// mean instead of naming them. Each is written in two pieces so that a
// search of the repository for the names finds none, this list included.
var citations = []string{
	"api" + ".md", "design" + ".md", "queue-design" + ".md", "../" + "shared", "/" + "shared/",
	"the " + "seed", "pull " + "seed", "/" + "seed/", "the " + "brief",
}

// TestNoCitationsOfOutsideDocuments walks README.md, docs/, every .go file
// and openapi.json and fails on any citation (case-insensitive).
func TestNoCitationsOfOutsideDocuments(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	self, err := filepath.Abs("citations_test.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		isDoc := rel == "README.md" || strings.HasPrefix(rel, "docs"+string(filepath.Separator))
		if path == self || !(isDoc || strings.HasSuffix(path, ".go") || d.Name() == "openapi.json") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		lower := bytes.ToLower(b)
		for _, c := range citations {
			if i := bytes.Index(lower, []byte(c)); i >= 0 {
				line := 1 + bytes.Count(b[:i], []byte("\n"))
				t.Errorf("%s:%d cites %q, a document outside the repository; say what it means instead", rel, line, c)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files under %s", checked, root)
	}
}
