package main

import (
	"bufio"
	"bytes"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The garbage collector's defaults of `sombus serve`: the message path
// allocates per request, and with Go's default (GOGC=100) collecting took a
// large share of a busy node's CPU. A node collects when its heap has grown
// by defaultGCPercent of what was live after the last collection, and keeps
// its heap under a soft limit, the smaller of maxMemoryLimit and half of
// the memory it may use (its cgroup's limit, else the machine's memory):
// near the limit the collector runs as often as needed. GOGC and
// GOMEMLIMIT, when set, are left to the runtime, which has read them.
const (
	defaultGCPercent = 400
	maxMemoryLimit   = 1 << 30
)

// gcDefaults applies the defaults above that the environment does not set
// and says what it set (0: left alone).
func gcDefaults() (percent int, limit int64) {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
		percent = defaultGCPercent
	}
	if _, ok := os.LookupEnv("GOMEMLIMIT"); !ok {
		limit = maxMemoryLimit
		if m := availableMemory(); m > 0 {
			limit = min(limit, m/2)
		}
		debug.SetMemoryLimit(limit)
	}
	return percent, limit
}

// availableMemory is the memory limit of the process's cgroup, else the
// machine's memory (0 when neither can be read).
func availableMemory() int64 {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(f); err == nil {
			if n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err == nil && n > 0 && n < 1<<50 {
				return n // "max" (v2) or a huge number (v1) mean no limit
			}
		}
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
