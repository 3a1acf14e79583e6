package servertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildSombus builds the sombus binary into a new temporary directory, for
// tests that run it as a process (several nodes, SIGKILLs). remove deletes
// the directory; call it when the package's tests are done.
func BuildSombus() (bin string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "sombus-bin-")
	if err != nil {
		return "", nil, fmt.Errorf("temp dir: %w", err)
	}
	remove = func() { _ = os.RemoveAll(dir) }
	bin = filepath.Join(dir, "sombus")
	cmd := exec.CommandContext(context.Background(), "go", "build", "-o", bin, "github.com/sombus/sombus/cmd/sombus") //nolint:gosec // bin is a path in our own temporary directory
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		remove()
		return "", nil, fmt.Errorf("go build ./cmd/sombus: %w\n%s", err, out)
	}
	return bin, remove, nil
}

// FreeAddr returns a loopback address whose port was free a moment ago (a
// process started on it may still lose the race; callers retry).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
