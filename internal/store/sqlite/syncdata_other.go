//go:build !linux

package sqlite

import "os"

// syncData flushes f to the disk: fsync (F_FULLFSYNC on macOS, which
// os.File.Sync uses there).
func syncData(f *os.File) error { return f.Sync() }
