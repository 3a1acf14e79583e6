//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sombus/sombus/internal/bus"
)

// lockFile takes an exclusive lock on the companion file path+"-lock" for
// as long as the store is open, so that a second process serving the same
// database fails at once with a clear error. The writer keeps the state
// of every queue's story heads in memory (heads.go): a second process
// writing the same queue tables would make that state wrong, and SQLite's
// own locks (which let two processes take turns writing) do not prevent
// it. The lock is flock(2) on a file of its own, independent of SQLite's
// fcntl locks on the database; the kernel releases it when the process
// ends, however it ends, so a crash never leaves a stale lock.
//
// The lock file is named after the database's real path (symbolic links
// resolved, the directory's when the file does not exist yet), so that two
// paths leading to one file through links take the same lock.
func lockFile(path string) (*os.File, error) {
	lp := realPath(path) + "-lock"
	f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open lock file %s: %w", lp, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("sqlite: %s is in use by another sombus process (it holds %s); one database file serves one process: %w",
				path, lp, bus.ErrUnavailable)
		}
		return nil, fmt.Errorf("sqlite: lock %s: %w", lp, err)
	}
	return f, nil
}

// realPath resolves the symbolic links of path: of the file when it exists,
// else of its directory; path itself when neither resolves.
func realPath(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		return filepath.Join(dir, filepath.Base(path))
	}
	return path
}
