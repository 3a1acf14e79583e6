package faulttest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// tmpfsEnv tells the test binary, started again as a helper, to mount a
// tmpfs ("DIR:SIZE") in a mount namespace of its own and then exec the
// command line it was given.
const tmpfsEnv = "SOMBUS_FAULTTEST_TMPFS"

// helperMain is the helper: it never returns when tmpfsEnv is set (it execs
// the node, or exits 3 when the mount fails).
func helperMain() bool {
	spec, ok := os.LookupEnv(tmpfsEnv)
	if !ok {
		return false
	}
	dir, size, _ := strings.Cut(spec, ":")
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "faulttest helper: %s: %v\n", what, err)
		os.Exit(3)
	}
	// Nothing mounted here may reach the machine's own mount table.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		fail("make / private", err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+size+",mode=0700"); err != nil {
		fail("mount tmpfs on "+dir, err)
	}
	env := make([]string, 0, len(os.Environ()))
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, tmpfsEnv+"=") {
			env = append(env, e)
		}
	}
	fail("exec", syscall.Exec(os.Args[1], os.Args[1:], env))
	return true
}

// inTmpfs returns a node wrapper that runs the node in a mount namespace of
// its own with a tmpfs of size (as mount's size=, "16m") on dir: a real
// small filesystem that fills up, which only that process sees and which
// goes with it. Root gets a mount namespace; anyone else a user namespace
// too (where unprivileged user namespaces are allowed). The files are
// reachable from the test at /proc/PID/root/DIR.
func inTmpfs(dir, size string) func(args []string) *exec.Cmd {
	return func(args []string) *exec.Cmd {
		self, err := os.Executable()
		if err != nil {
			self = os.Args[0]
		}
		cmd := exec.Command(self, args...)
		cmd.Env = append(os.Environ(), tmpfsEnv+"="+dir+":"+size)
		attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
		if os.Getuid() != 0 {
			attr.Cloneflags |= syscall.CLONE_NEWUSER
			attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
			attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
			attr.GidMappingsEnableSetgroups = false
		}
		cmd.SysProcAttr = attr
		return cmd
	}
}

// canMountTmpfs reports whether this machine lets the test mount a tmpfs
// in a namespace of its own (it tries, with a short-lived helper).
func canMountTmpfs(t testing.TB) error {
	t.Helper()
	dir := t.TempDir()
	cmd := inTmpfs(dir, "1m")([]string{"/bin/sh", "-c", "true"})
	if _, err := os.Stat("/bin/sh"); err != nil {
		cmd = inTmpfs(dir, "1m")([]string{"/usr/bin/true"})
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// fill writes a file into dir until the filesystem is full (ENOSPC) and
// returns its path and size.
func fill(dir string) (string, int64, error) {
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			// Fill the last partial page too.
			for _, size := range []int{4096, 512, 1} {
				for {
					w, err := f.Write(chunk[:size])
					n += int64(w)
					if err != nil {
						break
					}
				}
			}
			return path, n, nil
		}
		if err != nil {
			return path, n, err
		}
	}
}
