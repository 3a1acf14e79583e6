package main

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"time"
)

// A node that has gone quiet collects once and gives its free memory back.
//
// The collector runs when the heap has grown by GOGC percent of what was
// live (defaultGCPercent: four times), and what is live includes the
// goroutines' stacks: a node holding 10,000 waiting long polls, each a
// connection with its goroutines and buffers, may leave hundreds of MiB of
// garbage from its last busy spell uncollected for as long as the polls
// wait, since waiting allocates nothing. Its goroutines' stacks, grown
// while their requests were read and checked, shrink only at a collection.
// So every idleCheckInterval the node looks at its heap: when the pacing
// has not collected since the last look, and the heap holds garbage or free
// memory beyond idleWasteBytes and half of what is live (heap and stacks),
// or the last such collection still shrank stacks, it collects and returns
// the free memory to the operating system (debug.FreeOSMemory). A busy
// node collects on its own more often than that and is left alone; a quiet
// one pays at most one collection a look, and none once its heap is near
// what is live (the periodic work over every queue allocates a little).
const (
	idleCheckInterval = 5 * time.Second
	idleWasteBytes    = 16 << 20
)

// idleSample is what collectWhenIdle reads from the runtime.
type idleSample struct {
	cycles, objects, live, free, stacks uint64
}

var idleMetrics = []string{
	"/gc/cycles/total:gc-cycles",         // collections since the start
	"/memory/classes/heap/objects:bytes", // live and not yet swept garbage
	"/gc/heap/live:bytes",                // live after the last collection
	"/memory/classes/heap/free:bytes",    // free, not yet returned to the OS
	"/memory/classes/heap/stacks:bytes",  // goroutine stacks
}

func readIdleSample(s []metrics.Sample) idleSample {
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return idleSample{cycles: v(0), objects: v(1), live: v(2), free: v(3), stacks: v(4)}
}

// idleDecision says whether to collect now, given the sample of the last
// look (prev) and this one (cur), and whether the last idle collection
// shrank the stacks.
func idleDecision(prev, cur idleSample, shrinking bool) bool {
	if cur.cycles != prev.cycles {
		return false // the pacing collects on its own
	}
	waste := cur.free
	if cur.objects > cur.live {
		waste += cur.objects - cur.live
	}
	return waste > max(idleWasteBytes, (cur.live+cur.stacks)/2) || shrinking
}

// collectWhenIdle runs the idle collections until ctx ends; GOGC=off turns
// them off with the rest of the collector.
func collectWhenIdle(ctx context.Context, log *slog.Logger) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("GOGC")), "off") {
		return
	}
	s := make([]metrics.Sample, len(idleMetrics))
	for i, name := range idleMetrics {
		s[i].Name = name
	}
	prev := readIdleSample(s)
	shrinking := false
	t := time.NewTicker(idleCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := readIdleSample(s)
		if idleDecision(prev, cur, shrinking) {
			t0 := time.Now()
			debug.FreeOSMemory()
			after := readIdleSample(s)
			log.Debug("idle collection", "took", time.Since(t0), "heap_before_bytes", cur.objects, "heap_after_bytes", after.objects,
				"stacks_before_bytes", cur.stacks, "stacks_after_bytes", after.stacks, "released_bytes", cur.free)
			// Stacks shrink by half at most per collection: while they
			// still shrink by something, the next quiet look collects again.
			shrinking = after.stacks+(1<<20) <= cur.stacks
			cur = after
		} else {
			shrinking = false
		}
		prev = cur
	}
}
