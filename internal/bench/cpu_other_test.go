//go:build !unix

package bench

// processCPU is 0 where getrusage(2) is missing: cpu-us/msg then reads 0.
func processCPU() int64 { return 0 }
