package postgres

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// BenchmarkIdleReceive: receives of empty queues, as a wave of re-issued
// long polls makes them, from 64 callers over 256 queues: the claim
// (hint=off), each receive's own check (gathered=off), and the checks
// gathered into shared statements (the store's way). server-cpu-us/op is
// the machine's CPU outside this process per receive (PostgreSQL's, when
// nothing else runs), proc-cpu-us/op this process's.
func BenchmarkIdleReceive(b *testing.B) {
	for _, mode := range []string{"hint=off", "gathered=off", "gathered=on"} {
		b.Run(mode, func(b *testing.B) {
			s := OpenTest(b)
			queues := make([]string, 256)
			for i := range queues {
				_, _, queues[i] = setupQueue(b, s, 5)
			}
			if mode == "gathered=off" {
				s.idleChecks = &gatherer[idleCall]{inFlight: 1 << 30, maxSize: 1, maxCall: 1}
			}
			ctx := b.Context()
			var next atomic.Int64
			var wg sync.WaitGroup
			recv := func(q string) {
				if mode == "hint=off" {
					s.idle.forget(q)
				}
				if _, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: 10, Visibility: time.Minute, Now: time.Now()}); err != nil {
					b.Error(err)
				}
			}
			for _, q := range queues {
				recv(q) // marks it
			}
			b.ResetTimer()
			sys0, proc0 := machineCPU(), selfCPU()
			for range 64 {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						recv(queues[i%int64(len(queues))])
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			sys, proc := machineCPU()-sys0, selfCPU()-proc0
			b.ReportMetric(float64(sys-proc)/1e3/float64(b.N), "server-cpu-us/op")
			b.ReportMetric(float64(proc)/1e3/float64(b.N), "proc-cpu-us/op")
		})
	}
}

// machineCPU is the CPU time of the whole machine so far (/proc/stat: user,
// nice, system, irq, softirq), in nanoseconds.
func machineCPU() int64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} {
		if i < len(f) {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += n
		}
	}
	return ticks * int64(time.Second) / 100 // USER_HZ
}

// selfCPU is this process's CPU time so far, in nanoseconds.
func selfCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
