package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// restoreGC puts the garbage collector's settings back after a test.
func restoreGC(t *testing.T) {
	percent := debug.SetGCPercent(100)
	debug.SetGCPercent(percent)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

// unsetenv unsets name for the test (t.Setenv restores it).
func unsetenv(t *testing.T, name string) {
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

func TestGCDefaultsWithoutEnvironment(t *testing.T) {
	restoreGC(t)
	unsetenv(t, "GOGC")
	unsetenv(t, "GOMEMLIMIT")
	percent, limit := gcDefaults()
	if percent != defaultGCPercent || limit <= 0 || limit > maxMemoryLimit {
		t.Fatalf("gcDefaults() = %d, %d", percent, limit)
	}
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("GC percent %d, want %d", got, defaultGCPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit %d, want %d", got, limit)
	}
}

func TestGCDefaultsLeaveTheEnvironmentsSettings(t *testing.T) {
	restoreGC(t)
	t.Setenv("GOGC", "150")
	t.Setenv("GOMEMLIMIT", "300MiB")
	debug.SetGCPercent(150) // as the runtime read them at start
	debug.SetMemoryLimit(300 << 20)
	if percent, limit := gcDefaults(); percent != 0 || limit != 0 {
		t.Fatalf("gcDefaults() = %d, %d with GOGC and GOMEMLIMIT set", percent, limit)
	}
	if got := debug.SetGCPercent(100); got != 150 {
		t.Errorf("GC percent %d, want 150", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 300<<20 {
		t.Errorf("memory limit %d, want %d", got, 300<<20)
	}
}
