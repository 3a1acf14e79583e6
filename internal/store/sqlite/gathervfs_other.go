//go:build !unix

package sqlite

// registerGatherVFS: the gather VFS (gathervfs.go) wraps the unix VFS only;
// elsewhere the store uses the default VFS.
func registerGatherVFS() string { return "" }

// gatherBarrierReport: without the gather VFS no barrier flushes anything.
func gatherBarrierReport() string { return "" }
