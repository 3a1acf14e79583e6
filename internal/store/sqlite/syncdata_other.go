//go:build !linux

package sqlite

import "os"

// syncData flushes f to the disk: fsync (F_FULLFSYNC on macOS, which
// os.File.Sync uses there).
func syncData(f *os.File) error { return f.Sync() }

// fsyncFile makes the file at path durable (syncData). The file is opened
// each time: a sync through any descriptor of a file flushes the file, and
// a fresh open can never hold on to a WAL that was replaced.
func fsyncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = syncData(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
