//go:build unix

package sqlite

// The gather VFS: SQLite writes each WAL frame with two write calls (the
// 24-byte frame header, then the page), so a commit of N pages costs 2N
// pwrite system calls. This VFS wraps the default one and gathers the
// frames of a commit in a buffer per WAL file, written with one pwrite when
// the commit's last frame is complete. On BenchmarkPublishSingle a driver
// patched the same way took COMMIT from 155 to 109 us and the WAL's fsync
// from 352 to 298 us.
//
// Correctness rests on these facts of SQLite 3.x as transpiled in
// modernc.org/sqlite/lib (v1.62.0), checked in the generated code:
//
//   - _walFrames writes every frame through _walWriteOneFrame, which calls
//     _walWriteToLog twice: 24 bytes of frame header at the frame's offset,
//     then the page at offset+24. The header's bytes 4-7 (the database size
//     in pages) are non-zero only in a commit frame, and the commit frame
//     is the last frame _walFrames appends for a commit (under
//     synchronous=NORMAL it pads nothing after it).
//   - A commit becomes visible to other connections only through
//     _walIndexWriteHdr (called by _walFrames for a commit, and by
//     _walRestartHdr and _walIndexRecover), which copies the header to the
//     second slot of the wal-index, calls _walShmBarrier (xShmBarrier of
//     the database file, unless the WAL is in heap-memory mode, which needs
//     locking_mode=EXCLUSIVE; the store never sets it), and only then
//     copies it to the first slot. Readers (_walIndexTryHdr) read the first
//     slot, then the second, and accept the header only if both match. No
//     other code writes the shared header.
//   - _walRewriteChecksums (a transaction that wrote one page twice) reads
//     each frame with xRead, then rewrites its header with xWrite at the
//     same offset.
//
// Hence the rules, per WAL file:
//
//   - A write that continues the gathered bytes exactly is appended (while
//     the total stays under 0x1ffff bytes: seekAndWriteFd masks the count
//     with 0x1ffff, so a larger single write would fail with SQLITE_FULL).
//     Any other write flushes the gathered bytes first.
//   - The write that completes a commit frame (the page after a header
//     whose commit field is set) flushes at once, in that xWrite: a failed
//     write is then the commit's error, returned by _walFrames before the
//     header is published, exactly as without the gathering.
//   - A write at the offset of the file's last read (the checksum rewrite)
//     is written through.
//   - xRead, xSync, xTruncate, xFileSize, xFileControl and xClose flush
//     first, so the connection reads back what it wrote, a checkpoint's
//     sync covers every frame, and nothing written is lost at close.
//   - xShmBarrier and xShmLock of a database file first flush the WAL
//     files that the same connection wrote (see flushOwn). With the rules
//     above nothing is normally left to flush there; it guarantees that no
//     header is ever published with frames still in a buffer (the barrier
//     in _walIndexWriteHdr), and that no other writer, in this process or
//     another, takes the write lock (xShmLock) before they are written.
//
// A failed flush is never lost. Returned by the method that flushed, it is
// also kept: the file's later writes, and its reads of the bytes from the
// failed transaction's first write on, return it until SQLite starts
// writing a transaction again at or before that place (the frames it had
// written since are then no longer referenced by the wal-index). A failure
// in a flush that cannot return it (xShmBarrier returns nothing) is kept
// for good: the file then fails every call until it is closed.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// gatherVFSName is the name the store's connections open their files with.
const gatherVFSName = "sombus-gather"

// gatherMax bounds the bytes of one write: SQLite's seekAndWriteFd masks
// the count with 0x1ffff, so a write must stay below it.
const gatherMax = 0x1ffff

var (
	gatherOnce   sync.Once
	gatherRC     int32   // the registration's result code
	gatherOrig   uintptr // the default VFS (sqlite3_vfs*)
	gatherExtra  uintptr // offset of our two words in a file object
	gatherMu     sync.Mutex
	gatherTables map[gatherTableKey]uintptr // our io_methods, by original and kind
	// gatherFiles holds the open WAL files, indexed by handle-1; it is
	// replaced, never changed in place, so that flushOwn reads it without
	// a lock.
	gatherFiles atomic.Pointer[[]*walFile]
	// gatherPending counts the WAL files with gathered bytes: the barrier,
	// called at each read transaction's start, looks no further when it is
	// zero.
	gatherPending atomic.Int32
	// gatherWriteFault, when set (by tests), is consulted before each
	// underlying write of a WAL file, given the file's name; a non-zero
	// result fails the write with that code.
	gatherWriteFault atomic.Pointer[func(name string) int32]
)

type gatherTableKey struct {
	orig uintptr
	wal  bool
}

// walFile is the state of one WAL file opened through the gather VFS.
type walFile struct {
	mu     sync.Mutex
	name   string // the file's path (tests find files by it)
	pFile  uintptr
	orig   uintptr // the original io_methods
	buf    uintptr // C memory of gatherMax bytes
	start  int64   // offset of the gathered bytes
	n      int32   // gathered bytes
	closed bool
	// owner is the thread state of the connection that wrote the gathered
	// bytes: each connection of the driver makes every call with its own.
	owner *libc.TLS

	commitPageAt int64 // offset of the page a commit-frame header announced, or -1
	lastRead     int64 // offset of the last xRead, or -1
	base         int64 // offset of the first write since the last commit, or -1

	err     int32 // a failed flush, returned until SQLite rewinds to errBase
	errBase int64
	fatal   int32 // a failed flush that could not be returned

	writes atomic.Int64 // underlying writes (tests count them)
}

// registerGatherVFS registers the gather VFS once per process and returns
// its name, or "" if it could not be registered (the default VFS is then
// used).
func registerGatherVFS() string {
	gatherOnce.Do(func() {
		tls := libc.NewTLS()
		defer tls.Close()
		orig := sqlite3.Xsqlite3_vfs_find(tls, 0)
		if orig == 0 {
			gatherRC = sqlite3.SQLITE_ERROR
			return
		}
		name, err := libc.CString(gatherVFSName)
		if err != nil {
			gatherRC = sqlite3.SQLITE_NOMEM
			return
		}
		vfs := libc.Xmalloc(tls, libc.Tsize_t(unsafe.Sizeof(sqlite3.Tsqlite3_vfs{})))
		if vfs == 0 {
			gatherRC = sqlite3.SQLITE_NOMEM
			return
		}
		v := (*sqlite3.Tsqlite3_vfs)(cmem(vfs))
		*v = *(*sqlite3.Tsqlite3_vfs)(cmem(orig))
		gatherOrig = orig
		// Two words after the original file object: the WAL file's handle
		// (0 for other files) and the original io_methods.
		gatherExtra = (uintptr(v.FszOsFile) + 7) &^ 7
		v.FszOsFile = int32(gatherExtra + 2*unsafe.Sizeof(uintptr(0)))
		v.FzName = name
		v.FpNext = 0
		*(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&v.FxOpen)) = gatherOpen
		gatherTables = map[gatherTableKey]uintptr{}
		gatherRC = sqlite3.Xsqlite3_vfs_register(tls, vfs, 0)
	})
	if gatherRC != sqlite3.SQLITE_OK {
		return ""
	}
	return gatherVFSName
}

// gatherWords returns our two words of the file object pFile.
func gatherWords(pFile uintptr) (handle, orig *uintptr) {
	p := pFile + gatherExtra
	return (*uintptr)(cmem(p)), (*uintptr)(cmem(p + unsafe.Sizeof(uintptr(0))))
}

func gatherOpen(tls *libc.TLS, pVfs, zName, pFile uintptr, flags int32, pOutFlags uintptr) int32 {
	ov := (*sqlite3.Tsqlite3_vfs)(cmem(gatherOrig))
	h, o := gatherWords(pFile)
	*h, *o = 0, 0
	rc := (*(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{ov.FxOpen})))(tls, gatherOrig, zName, pFile, flags, pOutFlags)
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	file := (*sqlite3.Tsqlite3_file)(cmem(pFile))
	orig := file.FpMethods
	if orig == 0 {
		return rc
	}
	switch {
	case flags&sqlite3.SQLITE_OPEN_WAL != 0:
		buf := libc.Xmalloc(tls, gatherMax)
		if buf == 0 {
			return rc // the file works unchanged, without gathering
		}
		f := &walFile{name: libc.GoString(zName), pFile: pFile, orig: orig, buf: buf, commitPageAt: -1, lastRead: -1, base: -1}
		gatherMu.Lock()
		t := gatherTable(tls, orig, true)
		if t == 0 {
			gatherMu.Unlock()
			libc.Xfree(tls, buf)
			return rc
		}
		*h = gatherAdd(f)
		*o = orig
		file.FpMethods = t
		gatherMu.Unlock()
	case flags&sqlite3.SQLITE_OPEN_MAIN_DB != 0 && (*sqlite3.Tsqlite3_io_methods)(cmem(orig)).FiVersion >= 2:
		gatherMu.Lock()
		if t := gatherTable(tls, orig, false); t != 0 {
			*o = orig
			file.FpMethods = t
		}
		gatherMu.Unlock()
	}
	return rc
}

// gatherTable returns our io_methods for the original ones orig (made on
// first use, kept for the life of the process), for a WAL or a database
// file. gatherMu is held.
func gatherTable(tls *libc.TLS, orig uintptr, wal bool) uintptr {
	key := gatherTableKey{orig, wal}
	if t, ok := gatherTables[key]; ok {
		return t
	}
	t := libc.Xmalloc(tls, libc.Tsize_t(unsafe.Sizeof(sqlite3.Tsqlite3_io_methods{})))
	if t == 0 {
		return 0
	}
	m := (*sqlite3.Tsqlite3_io_methods)(cmem(t))
	*m = *(*sqlite3.Tsqlite3_io_methods)(cmem(orig))
	if wal {
		*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&m.FxClose)) = walClose
		*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&m.FxRead)) = walRead
		*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&m.FxWrite)) = walWrite
		*(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&m.FxTruncate)) = walTruncate
		*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&m.FxSync)) = walSync
		*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&m.FxFileSize)) = walFileSize
		*(*func(*libc.TLS, uintptr, int32, uintptr) int32)(unsafe.Pointer(&m.FxFileControl)) = walFileControl
	} else {
		*(*func(*libc.TLS, uintptr, int32, int32, int32) int32)(unsafe.Pointer(&m.FxShmLock)) = dbShmLock
		*(*func(*libc.TLS, uintptr))(unsafe.Pointer(&m.FxShmBarrier)) = dbShmBarrier
	}
	gatherTables[key] = t
	return t
}

// gatherAdd files f and returns its handle. gatherMu is held.
func gatherAdd(f *walFile) uintptr {
	var old []*walFile
	if p := gatherFiles.Load(); p != nil {
		old = *p
	}
	files := append([]*walFile(nil), old...)
	for i, g := range files {
		if g == nil {
			files[i] = f
			gatherFiles.Store(&files)
			return uintptr(i + 1)
		}
	}
	files = append(files, f)
	gatherFiles.Store(&files)
	return uintptr(len(files))
}

// gatherRemove forgets the file of handle h. gatherMu is held.
func gatherRemove(h uintptr) {
	files := append([]*walFile(nil), *gatherFiles.Load()...)
	files[h-1] = nil
	gatherFiles.Store(&files)
}

// walOf returns the state of the WAL file pFile.
func walOf(pFile uintptr) *walFile {
	h, _ := gatherWords(pFile)
	return (*gatherFiles.Load())[*h-1]
}

func origMethods(pFile uintptr) *sqlite3.Tsqlite3_io_methods {
	_, o := gatherWords(pFile)
	return (*sqlite3.Tsqlite3_io_methods)(cmem(*o))
}

// write is one underlying write of the WAL file.
func (f *walFile) write(tls *libc.TLS, buf uintptr, n int32, off int64) int32 {
	f.writes.Add(1)
	if fault := gatherWriteFault.Load(); fault != nil {
		if rc := (*fault)(f.name); rc != sqlite3.SQLITE_OK {
			return rc
		}
	}
	m := (*sqlite3.Tsqlite3_io_methods)(cmem(f.orig))
	return (*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&struct{ uintptr }{m.FxWrite})))(tls, f.pFile, buf, n, off)
}

// flush writes the gathered bytes, if any, and empties the buffer. On
// failure the error is kept (see check) and returned. f.mu is held.
func (f *walFile) flush(tls *libc.TLS) int32 {
	if f.n == 0 {
		return sqlite3.SQLITE_OK
	}
	start, n := f.start, f.n
	f.n = 0
	gatherPending.Add(-1)
	rc := f.write(tls, f.buf, n, start)
	if rc != sqlite3.SQLITE_OK && f.err == sqlite3.SQLITE_OK {
		// Everything from the transaction's first write on is suspect,
		// not only the failed bytes: the error is cleared only by a
		// transaction that starts again at or before that write, and a
		// frame header rewritten by this transaction (_walRewriteChecksums,
		// which reads the frame first: that read fails) must not clear it.
		f.err, f.errBase = rc, start
		if f.base >= 0 && f.base < start {
			f.errBase = f.base
		}
	}
	return rc
}

// check returns the error a call must fail with, if any. f.mu is held.
// After a failed flush that was returned, only the reads of the bytes
// from the failed transaction's first write on fail (SQLite reads them
// only if its wal-index still holds frames that were never written); the
// frames before were written, and a checkpoint or a new transaction reads
// them as usual.
func (f *walFile) check(readFrom, readLen int64) int32 {
	if f.fatal != sqlite3.SQLITE_OK {
		return f.fatal
	}
	if f.err != sqlite3.SQLITE_OK && readFrom >= 0 && readFrom+readLen > f.errBase {
		return f.err
	}
	return sqlite3.SQLITE_OK
}

func walWrite(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	f := walOf(pFile)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fatal != sqlite3.SQLITE_OK {
		return f.fatal
	}
	if f.err != sqlite3.SQLITE_OK {
		// SQLite starts a transaction's frames again at or before the
		// failed ones (a rollback, or a savepoint's that drops them): the
		// failed bytes are no longer part of anything it will read.
		if iOfst == 0 || (iAmt == 24 && iOfst <= f.errBase) {
			f.err = sqlite3.SQLITE_OK
			f.base = -1
		} else {
			return f.err
		}
	}
	commitPage := iOfst == f.commitPageAt
	f.commitPageAt = -1
	if f.n > 0 && iOfst == f.start+int64(f.n) && int64(f.n)+int64(iAmt) < gatherMax {
		f.append(zBuf, iAmt)
	} else {
		if rc := f.flush(tls); rc != sqlite3.SQLITE_OK {
			return rc
		}
		if iOfst == f.lastRead || iAmt >= gatherMax {
			// The checksum rewrite of a frame just read, after which
			// SQLite writes nothing more before publishing the commit.
			// The offset of the last read is not only that: recovery's
			// last read is at the first frame it found invalid, where
			// the next transaction writes its first frame header, maybe
			// its commit frame's. That header still announces the
			// commit page, which must then be flushed in its own xWrite.
			rc := f.write(tls, zBuf, iAmt, iOfst)
			if rc != sqlite3.SQLITE_OK {
				if f.err == sqlite3.SQLITE_OK {
					f.err, f.errBase = rc, iOfst
					if f.base >= 0 && f.base < iOfst {
						f.errBase = f.base
					}
				}
				return rc
			}
			if commitPage {
				f.base = -1
			} else if iAmt == 24 && *(*uint32)(cmem(zBuf + 4)) != 0 {
				f.commitPageAt = iOfst + 24
			}
			return rc
		}
		f.start = iOfst
		f.owner = tls
		gatherPending.Add(1)
		f.append(zBuf, iAmt)
	}
	if f.base < 0 || iOfst < f.base {
		// A transaction writes its frames from the end of the committed
		// ones on, and rewrites only frames of its own: a write below the
		// first one since the last commit starts another transaction (the
		// one before was rolled back, or the WAL restarted).
		f.base = iOfst
	}
	if commitPage {
		// The commit frame is complete: write the commit now, so that a
		// failure is this call's error, before SQLite publishes it.
		rc := f.flush(tls)
		if rc == sqlite3.SQLITE_OK {
			f.base = -1
		}
		return rc
	}
	if iAmt == 24 && *(*uint32)(cmem(zBuf + 4)) != 0 {
		// A frame header with a database size: the commit frame, whose
		// page comes next.
		f.commitPageAt = iOfst + 24
	}
	return sqlite3.SQLITE_OK
}

// append copies n bytes at p to the end of the gathered bytes.
func (f *walFile) append(p uintptr, n int32) {
	dst := unsafe.Slice((*byte)(cmem(f.buf+uintptr(f.n))), n)
	copy(dst, unsafe.Slice((*byte)(cmem(p)), n))
	f.n += n
}

// walFlushed locks and flushes the WAL file pFile and returns the error a
// call on it must fail with, if any; readFrom and readLen are the bytes
// the call reads (readFrom -1: none).
func walFlushed(tls *libc.TLS, pFile uintptr, readFrom, readLen int64) (*walFile, int32) {
	f := walOf(pFile)
	f.mu.Lock()
	if rc := f.check(readFrom, readLen); rc != sqlite3.SQLITE_OK {
		return f, rc
	}
	return f, f.flush(tls)
}

func walRead(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	f, rc := walFlushed(tls, pFile, iOfst, int64(iAmt))
	f.lastRead = iOfst
	f.commitPageAt = -1
	f.mu.Unlock()
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	m := origMethods(pFile)
	return (*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&struct{ uintptr }{m.FxRead})))(tls, pFile, zBuf, iAmt, iOfst)
}

func walTruncate(tls *libc.TLS, pFile uintptr, size int64) int32 {
	f, rc := walFlushed(tls, pFile, -1, 0)
	f.mu.Unlock()
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	m := origMethods(pFile)
	return (*(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&struct{ uintptr }{m.FxTruncate})))(tls, pFile, size)
}

func walSync(tls *libc.TLS, pFile uintptr, flags int32) int32 {
	f, rc := walFlushed(tls, pFile, -1, 0)
	f.mu.Unlock()
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	m := origMethods(pFile)
	return (*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&struct{ uintptr }{m.FxSync})))(tls, pFile, flags)
}

func walFileSize(tls *libc.TLS, pFile, pSize uintptr) int32 {
	f, rc := walFlushed(tls, pFile, -1, 0)
	f.mu.Unlock()
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	m := origMethods(pFile)
	return (*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{m.FxFileSize})))(tls, pFile, pSize)
}

func walFileControl(tls *libc.TLS, pFile uintptr, op int32, pArg uintptr) int32 {
	f, rc := walFlushed(tls, pFile, -1, 0)
	f.mu.Unlock()
	if rc != sqlite3.SQLITE_OK {
		return rc
	}
	m := origMethods(pFile)
	return (*(*func(*libc.TLS, uintptr, int32, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{m.FxFileControl})))(tls, pFile, op, pArg)
}

func walClose(tls *libc.TLS, pFile uintptr) int32 {
	h, _ := gatherWords(pFile)
	handle := *h
	f := walOf(pFile)
	f.mu.Lock()
	rc := f.check(-1, 0)
	if rc == sqlite3.SQLITE_OK {
		rc = f.flush(tls)
	} else if f.n > 0 {
		f.n = 0
		gatherPending.Add(-1)
	}
	f.closed = true
	libc.Xfree(tls, f.buf)
	f.buf = 0
	f.mu.Unlock()
	gatherMu.Lock()
	gatherRemove(handle)
	gatherMu.Unlock()
	m := origMethods(pFile)
	if crc := (*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{m.FxClose})))(tls, pFile); rc == sqlite3.SQLITE_OK {
		rc = crc
	}
	return rc
}

// flushOwn flushes the gathered bytes of every WAL file written by the
// connection of tls, and returns the name of one it flushed ("" if none
// held any). A failure cannot be returned to anyone: the file keeps it for
// good.
//
// Only the connection's own files: a commit is published by the connection
// that wrote it (its _walIndexWriteHdr calls xShmBarrier on its own
// database file, with its own thread state), and it releases the write
// lock with its own xShmLock. Flushing other connections' bytes would add
// nothing to that guarantee, and would split a commit that the writer is
// gathering whenever a reader starts a read transaction.
func flushOwn(tls *libc.TLS) (flushed string) {
	if gatherPending.Load() == 0 {
		return ""
	}
	p := gatherFiles.Load()
	if p == nil {
		return ""
	}
	for _, f := range *p {
		if f == nil {
			continue
		}
		f.mu.Lock()
		if !f.closed && f.n > 0 && f.owner == tls {
			flushed = f.name
			if rc := f.flush(tls); rc != sqlite3.SQLITE_OK && f.fatal == sqlite3.SQLITE_OK {
				f.fatal = rc
			}
		}
		f.mu.Unlock()
	}
	return flushed
}

// gatherBarrierFlushes counts the barriers that found gathered bytes to
// flush, and gatherBarrierFirst names the WAL file of the first. The commit
// frame's own write flushes a commit, so a barrier should never find any:
// one that did published a header whose frames it wrote only then, with no
// way to fail the commit if that write failed. The tests check it stays 0
// (gatherBarrierReport).
var (
	gatherBarrierFlushes atomic.Int64
	gatherBarrierFirst   atomic.Pointer[string]
)

// gatherBarrierReport says how many barriers found frames to write, and
// in which WAL file first; "" if none did.
func gatherBarrierReport() string {
	n := gatherBarrierFlushes.Load()
	if n == 0 {
		return ""
	}
	first := ""
	if p := gatherBarrierFirst.Load(); p != nil {
		first = *p
	}
	return fmt.Sprintf("%d barriers of the gather VFS found WAL frames not yet written (the first in %s): "+
		"a commit was published before its frames were in the file", n, first)
}

func dbShmBarrier(tls *libc.TLS, pFile uintptr) {
	// The barrier sits between the two copies of the wal-index header that
	// publish a commit (_walIndexWriteHdr): the frames must be in the WAL
	// file before a reader can accept the header.
	if name := flushOwn(tls); name != "" {
		gatherBarrierFlushes.Add(1)
		gatherBarrierFirst.CompareAndSwap(nil, &name)
	}
	m := origMethods(pFile)
	(*(*func(*libc.TLS, uintptr))(unsafe.Pointer(&struct{ uintptr }{m.FxShmBarrier})))(tls, pFile)
}

func dbShmLock(tls *libc.TLS, pFile uintptr, offset, n, flags int32) int32 {
	// Before the write lock changes hands, the frames of the last writer
	// must be in the file, or a later flush would overwrite the frames the
	// next writer puts at the same offsets.
	flushOwn(tls)
	m := origMethods(pFile)
	return (*(*func(*libc.TLS, uintptr, int32, int32, int32) int32)(unsafe.Pointer(&struct{ uintptr }{m.FxShmLock})))(tls, pFile, offset, n, flags)
}

// cmem converts the address of C memory (libc's heap, SQLite's objects:
// never moved nor collected by Go) to a pointer.
func cmem(p uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p)) //nolint:gosec // G103: C memory, see above
}
