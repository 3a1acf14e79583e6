package sqlite

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the package's tests, then fails the run if a barrier of
// the gather VFS found frames to write (gatherBarrierReport): every commit
// of every test, the shared store tests' included, must have written its
// frames in its own commit frame's write. Then it removes the depth
// benchmarks' template files.
func TestMain(m *testing.M) {
	code := m.Run()
	if report := gatherBarrierReport(); report != "" {
		fmt.Fprintln(os.Stderr, "FAIL:", report)
		code = 1
	}
	removeDepthTemplates()
	os.Exit(code)
}
