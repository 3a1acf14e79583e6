//go:build !unix

package sqlite

import "os"

// lockFile on systems without flock(2) takes no lock: one process per
// database file is then the operator's to ensure (see lockfile.go).
func lockFile(path string) (*os.File, error) { return nil, nil }
