//go:build unix

package bench

import "syscall"

// processCPU is the CPU time the process has used (every thread, the
// client's and the garbage collector's included), in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
