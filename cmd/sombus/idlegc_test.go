package main

import "testing"

func TestIdleDecision(t *testing.T) {
	const mib = 1 << 20
	quiet := idleSample{cycles: 7, objects: 400 * mib, live: 100 * mib, stacks: 100 * mib}
	if !idleDecision(quiet, quiet, false) {
		t.Error("a quiet node with 300 MiB of garbage over 200 MiB live should collect")
	}
	busy := quiet
	busy.cycles--
	if idleDecision(busy, quiet, false) {
		t.Error("a node that collected on its own since the last look should be left to the pacing")
	}
	tidy := quiet
	tidy.objects = 150 * mib // 50 MiB of garbage: under half of what is live
	if idleDecision(tidy, tidy, false) {
		t.Error("a node near its live heap should not collect")
	}
	if !idleDecision(tidy, tidy, true) {
		t.Error("a node whose stacks still shrank should collect again")
	}
	tidy.free = 120 * mib // free memory not returned: counts as waste
	if !idleDecision(tidy, tidy, false) {
		t.Error("a node holding 170 MiB of garbage and free memory over 200 MiB live should collect")
	}
	small := idleSample{cycles: 7, objects: 12 * mib, live: 4 * mib, stacks: 1 * mib}
	if idleDecision(small, small, false) {
		t.Error("8 MiB of garbage is under the floor")
	}
}
