package main

import "testing"

func TestIdleDecision(t *testing.T) {
	const mib = 1 << 20
	quiet := idleSample{allocs: 100 * mib, objects: 300 * mib, live: 100 * mib, stacks: 100 * mib, goal: 1000 * mib}
	prev := quiet
	prev.allocs -= 1 * mib // 1 MiB in the last look: the pacing would wait for minutes
	if !idleDecision(prev, quiet, false) {
		t.Error("a quiet node with 200 MiB of garbage over 200 MiB live should collect")
	}
	busy := prev
	busy.allocs -= 100 * mib // 101 MiB a look: the pacing collects within the horizon
	if idleDecision(busy, quiet, false) {
		t.Error("a busy node should be left to the pacing")
	}
	tidy := quiet
	tidy.objects = 110 * mib // 10 MiB of garbage: under the floor
	if idleDecision(prev, tidy, false) {
		t.Error("a node near its live heap should not collect")
	}
	if !idleDecision(prev, tidy, true) {
		t.Error("a node whose stacks still shrank should collect again")
	}
	tidy.free = 120 * mib // free memory not returned: counts as waste
	if !idleDecision(prev, tidy, false) {
		t.Error("a node holding 120 MiB of free memory over 200 MiB live should collect")
	}
}
