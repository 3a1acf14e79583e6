package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLinksNoTestCode checks that the sombus binary does not link
// the testing packages or the repository's test-support packages: test code
// in a non-test file would otherwise ship in the binary (and register the
// testing package's flags).
func TestBinaryLinksNoTestCode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case pkg == "testing", strings.HasPrefix(pkg, "testing/"), pkg == "net/http/httptest",
			strings.HasSuffix(pkg, "test") && strings.HasPrefix(pkg, "github.com/sombus/sombus/"):
			t.Errorf("the sombus binary links %s, which is for tests only", pkg)
		}
	}
}
