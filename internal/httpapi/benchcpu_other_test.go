//go:build !unix

package httpapi_test

// processCPU is not measured here.
func processCPU() int64 { return 0 }
