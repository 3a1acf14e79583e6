package loadcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sombus/sombus/client"
)

// envelope is message seq of story st, sent first at sent.
func (r *run) envelope(st, seq int, sent time.Time) json.RawMessage {
	var b strings.Builder
	b.Grow(len(r.pad) + 200)
	b.WriteString(`{"som_version":"1.0.0","message_id":"`)
	b.WriteString(r.prefix + strconv.Itoa(st) + "-" + strconv.Itoa(seq))
	b.WriteString(`","message_type":"` + r.cfg.MessageType + `","correlation_id":"`)
	b.WriteString(r.prefix + "s" + strconv.Itoa(st))
	b.WriteString(`","payload":{"story":` + strconv.Itoa(st) + `,"seq":` + strconv.Itoa(seq) + `,"t":` + strconv.FormatInt(sent.UnixNano(), 10))
	b.WriteString(`,"pad":"` + r.pad + `"}}`)
	return json.RawMessage(b.String())
}

// payload is what a message's payload says of it.
type payload struct {
	Story int   `json:"story"`
	Seq   int   `json:"seq"`
	T     int64 `json:"t"`
}

// publisher publishes the messages of its stories (st % Publishers == p),
// round by round, each story's in sequence.
func (r *run) publisher(ctx context.Context, p int) error {
	cfg := r.cfg
	type item struct{ st, seq int }
	var batch []item
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if cfg.Rate > 0 {
			n := r.claimed.Add(int64(len(batch))) - int64(len(batch))
			due := r.start.Add(time.Duration(float64(n) / cfg.Rate * float64(time.Second)))
			if err := sleep(ctx, time.Until(due)); err != nil {
				return nil
			}
		}
		sent := time.Now()
		raws := make([]json.RawMessage, len(batch))
		for i, it := range batch {
			raws[i] = r.envelope(it.st, it.seq, sent)
		}
		var results []client.PublishResult
		err := r.retry(ctx, func(c context.Context) error {
			if len(raws) == 1 && cfg.BatchSize == 1 {
				res, err := r.prod.PublishRaw(c, raws[0])
				if err == nil {
					results = []client.PublishResult{*res}
				}
				return err
			}
			var err error
			results, err = r.prod.PublishBatchRaw(c, raws)
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil // the run ends; this publish's fate is unknown
			}
			return fmt.Errorf("loadcheck: publish: %w", err)
		}
		r.sample(&r.pub, time.Since(sent))
		for i, res := range results {
			if !res.Accepted {
				return fmt.Errorf("loadcheck: publish of story %d message %d refused: %w", batch[i].st, batch[i].seq, res.Err())
			}
			r.ck.Accepted(r.prefix+strconv.Itoa(batch[i].st)+"-"+strconv.Itoa(batch[i].seq), batch[i].st, batch[i].seq)
		}
		batch = batch[:0]
		return nil
	}
	for seq := 0; ; seq++ {
		more := false
		for st := p; st < cfg.Stories; st += cfg.Publishers {
			if cfg.Messages > 0 && seq*cfg.Stories+st >= cfg.Messages {
				break
			}
			if ctx.Err() != nil || (cfg.Duration > 0 && time.Since(r.start) >= cfg.Duration) {
				return flush()
			}
			more = true
			batch = append(batch, item{st, seq})
			if len(batch) == cfg.BatchSize {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if !more {
			return flush()
		}
	}
}

// receiver receives, checks and settles until ctx ends.
func (r *run) receiver(ctx context.Context) error {
	cfg := r.cfg
	wait := cfg.ReceiveWait
	if wait <= 0 {
		wait = client.NoWait
	}
	for ctx.Err() == nil {
		attempt := client.NewAttemptID()
		sent := time.Now()
		var msgs []client.Message
		err := r.retry(ctx, func(c context.Context) error {
			var err error
			msgs, err = r.cons.Receive(c, client.ReceiveOptions{Max: cfg.ReceiveMax, Wait: wait, Visibility: cfg.Visibility, AttemptID: attempt})
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("loadcheck: receive: %w", err)
		}
		answered := time.Now()
		if len(msgs) == 0 {
			continue
		}
		r.sample(&r.recv, answered.Sub(sent))
		var acks, nacks []string
		for _, m := range msgs {
			var pl payload
			if !strings.HasPrefix(m.MessageID, r.prefix) || json.Unmarshal(m.Payload, &pl) != nil {
				r.count(&r.foreign)
				acks = append(acks, m.ReceiptHandle)
				continue
			}
			first := r.ck.Delivered(Delivery{MessageID: m.MessageID, Story: pl.Story, Seq: pl.Seq, Handle: m.ReceiptHandle,
				ReceiveID: attempt, ReceiveCount: m.ReceiveCount, Sent: sent, Answered: answered, Visibility: cfg.Visibility})
			if first {
				r.mu.Lock()
				r.e2e.add(answered.Sub(time.Unix(0, pl.T)))
				r.lastFirst = answered
				r.mu.Unlock()
			}
			if cfg.NackRatio > 0 && rand.Float64() < cfg.NackRatio { //nolint:gosec // a load pattern, not a secret
				nacks = append(nacks, m.ReceiptHandle)
			} else {
				acks = append(acks, m.ReceiptHandle)
			}
		}
		if err := r.settle(ctx, acks, true); err != nil {
			return err
		}
		if err := r.settle(ctx, nacks, false); err != nil {
			return err
		}
	}
	return nil
}

// settle acknowledges (ack) or releases handles, retrying with the same
// handles.
func (r *run) settle(ctx context.Context, handles []string, ack bool) error {
	if len(handles) == 0 {
		return nil
	}
	sent := time.Now()
	for _, h := range handles {
		r.ck.SettleSent(h, sent)
	}
	var res *client.SettleResult
	err := r.retry(ctx, func(c context.Context) error {
		var err error
		if ack {
			res, err = r.cons.Ack(c, handles...)
		} else {
			res, err = r.cons.Nack(c, handles, 0)
		}
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("loadcheck: settle: %w", err)
	}
	at := time.Now()
	if ack {
		r.sample(&r.ack, at.Sub(sent))
		for _, h := range res.Settled {
			r.ck.Acked(h, at)
		}
	} else {
		for _, h := range res.Settled {
			r.ck.Released(h)
		}
		r.mu.Lock()
		r.nacked += int64(len(res.Settled))
		r.mu.Unlock()
	}
	for _, f := range res.Failed {
		r.ck.Released(f.ReceiptHandle)
	}
	r.mu.Lock()
	r.stale += int64(len(res.Failed))
	r.mu.Unlock()
	return nil
}

// retry calls f until it succeeds, ctx ends or the bus refuses for good.
// f is the same request each time (same message ids, attempt id or
// handles): the SDK's own retries are off, so that every failure counts.
func (r *run) retry(ctx context.Context, f func(context.Context) error) error {
	unauthorized := 0
	for attempt := 0; ; attempt++ {
		err := f(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		r.countErr(err)
		wait := min(50*time.Millisecond<<min(attempt, 5), time.Second)
		var e *client.Error
		if errors.As(err, &e) {
			switch {
			case e.Status == http.StatusTooManyRequests || e.Status >= 500:
				if e.RetryAfter > 0 {
					wait = min(e.RetryAfter, 2*time.Second)
				}
			case e.Status == http.StatusUnauthorized && unauthorized < 5:
				// A node restarting may refuse a token for a moment.
				unauthorized++
			default:
				return err
			}
		}
		wait = wait/2 + rand.N(wait/2+1) //nolint:gosec // jitter
		if sleep(ctx, wait) != nil {
			return err
		}
	}
}

func (r *run) countErr(err error) {
	rule := client.RuleOf(err)
	if rule == "" {
		var e *client.Error
		if errors.As(err, &e) {
			rule = "http." + strconv.Itoa(e.Status)
		} else {
			rule = "network"
		}
	}
	r.mu.Lock()
	r.errs[rule]++
	r.nerrs++
	r.mu.Unlock()
}

func (r *run) count(n *int64) {
	r.mu.Lock()
	*n++
	r.mu.Unlock()
}

func (r *run) sample(h *histogram, d time.Duration) {
	r.mu.Lock()
	h.add(d)
	r.mu.Unlock()
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// progress reports every ProgressEvery until done is closed.
func (r *run) progress(done <-chan struct{}) {
	cfg := r.cfg
	if cfg.Progress == nil && cfg.ProgressWriter == nil {
		return
	}
	t := time.NewTicker(cfg.ProgressEvery)
	defer t.Stop()
	var last Counts
	lastAt := r.start
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			c := r.ck.Counts()
			r.mu.Lock()
			p := Progress{Elapsed: now.Sub(r.start), Phase: r.phase, Counts: c, Errors: r.nerrs}
			r.mu.Unlock()
			secs := now.Sub(lastAt).Seconds()
			p.PublishRate = float64(c.Accepted-last.Accepted) / secs
			p.DeliveryRate = float64(c.Delivered-last.Delivered) / secs
			p.Backlog = max(0, c.Accepted-c.Acked)
			last, lastAt = c, now
			if cfg.Progress != nil {
				cfg.Progress(p)
			}
			if cfg.ProgressWriter != nil {
				_, _ = fmt.Fprintln(cfg.ProgressWriter, p.String())
			}
		}
	}
}

// report fills rep at the end of the run.
func (r *run) report(rep *Report) {
	cfg := r.cfg
	counts, examples := r.ck.Finish()
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &rep.Config
	c.Publishers, c.Receivers, c.Stories, c.Messages = cfg.Publishers, cfg.Receivers, cfg.Stories, cfg.Messages
	if cfg.Duration > 0 {
		c.Duration = cfg.Duration.String()
	}
	c.PayloadSize, c.BatchSize, c.ReceiveMax = cfg.PayloadSize, cfg.BatchSize, cfg.ReceiveMax
	c.ReceiveWait, c.Visibility, c.NackRatio, c.Rate = cfg.ReceiveWait.String(), cfg.Visibility.String(), cfg.NackRatio, cfg.Rate
	rep.Started = r.start.UTC()
	end := r.publishEnd
	if end.IsZero() {
		end = now
	}
	rep.PublishSeconds = end.Sub(r.start).Seconds()
	rep.TotalSeconds = now.Sub(r.start).Seconds()
	rep.Accepted, rep.Delivered, rep.Deliveries = counts.Accepted, counts.Delivered, counts.Deliveries
	rep.Duplicates, rep.Acked = counts.Duplicates, counts.Acked
	rep.Nacked, rep.StaleHandles, rep.Foreign = r.nacked, r.stale, r.foreign
	rep.Drained = counts.Acked >= counts.Accepted && r.ck.Drained()
	if rep.PublishSeconds > 0 {
		rep.PublishRate = float64(counts.Accepted) / rep.PublishSeconds
	}
	if d := r.lastFirst.Sub(r.start).Seconds(); d > 0 {
		rep.DeliveryRate = float64(counts.Delivered) / d
	}
	rep.EndToEnd, rep.Publish, rep.Receive, rep.Ack = latency(&r.e2e), latency(&r.pub), latency(&r.recv), latency(&r.ack)
	for k, v := range r.errs {
		rep.Errors[k] = v
	}
	rep.Violations = counts.Violations
	rep.Examples = examples
	rep.Verdict = "OK"
	for _, n := range counts.Violations {
		if n > 0 {
			rep.Verdict = "FAIL"
		}
	}
}
