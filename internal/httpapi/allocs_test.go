package httpapi_test

import (
	"runtime"
	"testing"
)

// Drained-message allocation bounds: what a message costs the node's heap
// on its way out (its share of a receive of 10 and of their ack, through
// the whole handler, as BenchmarkDrain measures it). The goal is fewer than
// 30 allocations and 6 KB a message; the drain allocated 12.4 times and
// 2.7 KB a message when these were set (docs/benchmarks.md).
//
// Under the race detector sync.Pool drops pooled buffers at random, and the
// same drain allocated 18.1-18.5 times and 4.7 KB a message: about 1.5
// times the allocations and 1.75 times the bytes. The bounds there are the
// goal's, scaled by those factors, so that a build with the race detector
// fails where a build without it would miss the goal, and not before.
const (
	maxDrainAllocsPerMessage = 30
	maxDrainBytesPerMessage  = 6 << 10
	raceAllocsFactor         = 1.5
	raceBytesFactor          = 1.75
)

// TestDrainAllocations keeps the drain's allocations a message under the
// bounds above, so that a change of the request path that allocates per
// message again fails here and not only in a benchmark nobody runs. It
// counts, it does not time: the figures do not depend on the machine's speed.
func TestDrainAllocations(t *testing.T) {
	const warm, drains = 20, 300
	n := newBenchNode(t)
	n.fill(t, 10*(warm+drains), thousandStories)
	d := n.drainer()
	for range warm { // statements prepared, buffers grown, caches filled
		d.ten(t)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range drains {
		d.ten(t)
	}
	runtime.ReadMemStats(&after)
	msgs := float64(10 * drains)
	allocs := float64(after.Mallocs-before.Mallocs) / msgs
	bytes := float64(after.TotalAlloc-before.TotalAlloc) / msgs
	maxAllocs, maxBytes := float64(maxDrainAllocsPerMessage), float64(maxDrainBytesPerMessage)
	if raceEnabled {
		maxAllocs, maxBytes = maxAllocs*raceAllocsFactor, maxBytes*raceBytesFactor
	}
	t.Logf("drain: %.1f allocations and %.0f B a message (%d messages; race detector %v)", allocs, bytes, 10*drains, raceEnabled)
	if allocs >= maxAllocs {
		t.Errorf("a drained message allocated %.1f times; the bound is under %.0f", allocs, maxAllocs)
	}
	if bytes >= maxBytes {
		t.Errorf("a drained message allocated %.0f B; the bound is under %.0f B", bytes, maxBytes)
	}
}
