package httpapi_test

import (
	"runtime"
	"testing"
)

// Drained-message allocation bounds: what a message costs the node's heap
// on its way out (its share of a receive of 10 and of their ack, through
// the whole handler, as BenchmarkDrain measures it). The drain allocated
// 12.4 times and 2.7 KB a message when these were set (docs/benchmarks.md);
// the bounds leave room for the race detector's sync.Pool, which drops
// pooled buffers at random, and for background work of the node that falls
// in the window, but not for a request path that goes back to building
// each message anew.
const (
	maxDrainAllocsPerMessage = 30
	maxDrainBytesPerMessage  = 6 << 10
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
	t.Logf("drain: %.1f allocations and %.0f B a message (%d messages)", allocs, bytes, 10*drains)
	if allocs > maxDrainAllocsPerMessage {
		t.Errorf("a drained message allocated %.1f times; the bound is %d", allocs, maxDrainAllocsPerMessage)
	}
	if bytes > maxDrainBytesPerMessage {
		t.Errorf("a drained message allocated %.0f B; the bound is %d B", bytes, maxDrainBytesPerMessage)
	}
}
