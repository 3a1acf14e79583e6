package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// phases, in the order they run.
var phases = [...]string{"publish, single", "publish, batch", "drain"}

type result struct {
	rate     float64 // messages a second
	p50, p99 time.Duration
}

type phaseResults [len(phases)]result

// measure runs the three phases against s on a fresh queue.
func measure(ctx context.Context, cfg config, s system, run int) (phaseResults, error) {
	var out phaseResults
	if err := s.Reset(ctx, run); err != nil {
		return out, fmt.Errorf("reset: %w", err)
	}
	payload := strings.Repeat("x", cfg.payload)
	mk := func(phase, i int) msg {
		id := "r" + strconv.Itoa(run) + "-p" + strconv.Itoa(phase) + "-" + strconv.Itoa(i)
		story := "story-" + strconv.Itoa(i%cfg.stories)
		return msg{id: id, story: story, body: envelope(id, story, payload)}
	}
	// Publish, single.
	var err error
	out[0], err = timed(cfg.messages, cfg.messages, cfg.workers, func(w, i int) error {
		return s.Publish(ctx, w, []msg{mk(0, i)})
	})
	if err != nil {
		return out, fmt.Errorf("publish, single: %w", err)
	}
	// Publish, batch.
	batches := (cfg.messages + cfg.batch - 1) / cfg.batch
	out[1], err = timed(cfg.messages, batches, cfg.workers, func(w, i int) error {
		msgs := make([]msg, 0, cfg.batch)
		for j := i * cfg.batch; j < min((i+1)*cfg.batch, cfg.messages); j++ {
			msgs = append(msgs, mk(1, j))
		}
		return s.Publish(ctx, w, msgs)
	})
	if err != nil {
		return out, fmt.Errorf("publish, batch: %w", err)
	}
	// Drain both phases' messages.
	if p, ok := s.(interface{ BeforeDrain(context.Context) error }); ok {
		if err := p.BeforeDrain(ctx); err != nil {
			return out, fmt.Errorf("before the drain: %w", err)
		}
	}
	out[2], err = drainPhase(ctx, cfg, s, 2*cfg.messages)
	if err != nil {
		return out, fmt.Errorf("drain: %w", err)
	}
	return out, nil
}

// envelope is a message's bytes: a valid envelope whose payload is
// {"data": payload}.
func envelope(id, story, payload string) []byte {
	b := make([]byte, 0, len(payload)+160)
	b = append(b, `{"som_version":"1.0.0","message_id":"`...)
	b = append(b, id...)
	b = append(b, `","message_type":"story.context","correlation_id":"`...)
	b = append(b, story...)
	b = append(b, `","payload":{"data":"`...)
	b = append(b, payload...)
	return append(b, `"}}`...)
}

// timed runs request(w, i) for i in [0, requests) over workers goroutines
// and gives the rate of msgs messages over the elapsed time, and the
// requests' latencies.
func timed(msgs, requests, workers int, request func(w, i int) error) (result, error) {
	var next atomic.Int64
	lat := make([][]time.Duration, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= requests {
					return
				}
				r0 := time.Now()
				if err := request(w, i); err != nil {
					errs[w] = err
					next.Store(int64(requests)) // the others stop too
					return
				}
				lat[w] = append(lat[w], time.Since(r0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return result{}, err
	}
	return summary(msgs, elapsed, lat), nil
}

func summary(msgs int, elapsed time.Duration, lat [][]time.Duration) result {
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(q float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(q*float64(len(all))))]
	}
	return result{rate: float64(msgs) / elapsed.Seconds(), p50: pct(0.50), p99: pct(0.99)}
}

// drainPhase runs the receivers until total messages are acknowledged.
// The latency is that of a receive that got messages plus its ack.
func drainPhase(ctx context.Context, cfg config, s system, total int) (result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done atomic.Int64
	lat := make([][]time.Duration, cfg.workers)
	errs := make([]error, cfg.workers)
	var wg sync.WaitGroup
	t0 := time.Now()
	deadline := time.AfterFunc(5*time.Minute, cancel)
	defer deadline.Stop()
	for w := range cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(total) {
				r0 := time.Now()
				got, err := s.Receive(ctx, w, cfg.receiveMax)
				if done.Load() >= int64(total) {
					return // drained: the last waiting receives are cut short
				}
				if err != nil {
					errs[w] = err
					cancel()
					return
				}
				if len(got) == 0 {
					continue
				}
				if err := s.Ack(ctx, w, got); err != nil {
					errs[w] = err
					cancel()
					return
				}
				lat[w] = append(lat[w], time.Since(r0))
				if done.Add(int64(len(got))) >= int64(total) {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return result{}, err
	}
	if n := done.Load(); n < int64(total) {
		return result{}, fmt.Errorf("%d of %d messages acknowledged in 5 minutes", n, total)
	}
	return summary(total, elapsed, lat), nil
}
