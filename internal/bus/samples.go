package bus

import (
	"context"
	"fmt"
	"time"
)

// Queue samples: the bus records every consumer queue's counts itself at a
// fixed interval and keeps them for a day, so the portal can draw a queue's
// recent history without an outside metrics system. Each interval that was
// sampled is recorded as a round; a queue's counts are written only when
// they differ from its latest sample, and carried forward to the rounds in
// between when read. A node with many idle queues then writes (and later
// deletes) almost nothing each interval, and a round missing (no node was
// running) still shows as a gap.
const (
	// DefaultSampleEvery is the interval between two samples of the queues.
	DefaultSampleEvery = 10 * time.Second
	// DefaultSampleKeep is how long samples are kept.
	DefaultSampleKeep = 24 * time.Hour
)

// QueueSample is one consumer queue's counts at one moment, counted as
// QueueStats counts them.
type QueueSample struct {
	At          time.Time `json:"at"`
	Ready       int64     `json:"ready"`
	InFlight    int64     `json:"in_flight"`
	Delayed     int64     `json:"delayed"`
	DeadLetters int64     `json:"dead_letters"`
}

// QueueSampleParams records one sample of every consumer queue.
type QueueSampleParams struct {
	// Now is the moment the counts are taken at (what is in flight or
	// delayed depends on it).
	Now time.Time
	// At is the time the sample is recorded under: Now truncated to the
	// sampling interval, so nodes sampling within one interval write one
	// sample.
	At time.Time
}

// SampleEvery is the interval between two samples of the queues.
func (s *Service) SampleEvery() time.Duration { return s.cfg.SampleEvery }

// Sample records one sample of every consumer queue now, under the current
// interval (a queue already sampled in it keeps its sample, a queue whose
// counts did not change is carried forward), and deletes the samples older
// than the keep time. It returns how many queue samples it wrote.
func (s *Service) Sample(ctx context.Context) (int, error) {
	now := s.clock.Now()
	n, err := s.store.QueueSample(ctx, &QueueSampleParams{Now: now, At: now.Truncate(s.cfg.SampleEvery)})
	if err != nil {
		return 0, fmt.Errorf("sample queues: %w", err)
	}
	if _, err := s.store.QueueSamplePrune(ctx, now.Add(-s.cfg.SampleKeep)); err != nil {
		return n, fmt.Errorf("prune queue samples: %w", err)
	}
	return n, nil
}

// QueueHistory reads a consumer queue's samples taken at or after since,
// oldest first (viewers). Samples older than the keep time are gone.
func (s *Service) QueueHistory(ctx context.Context, a *Actor, workspaceID, connectionID string, since time.Time) ([]QueueSample, error) {
	if _, err := s.requireConsumer(ctx, a, workspaceID, connectionID, RoleViewer); err != nil {
		return nil, err
	}
	samples, err := s.store.QueueSamples(ctx, connectionID, since)
	if err != nil {
		return nil, fmt.Errorf("queue history: %w", err)
	}
	if samples == nil {
		samples = []QueueSample{}
	}
	return samples, nil
}

// FillSamples gives a queue's counts at each round (ascending) from its
// samples (ascending, the first at or before the first round if the queue
// had counts then): at each round, the latest sample at or before it,
// under the round's time. Rounds before the first sample have none.
func FillSamples(rounds []time.Time, samples []QueueSample) []QueueSample {
	out := make([]QueueSample, 0, len(rounds))
	var cur *QueueSample
	j := 0
	for _, r := range rounds {
		for j < len(samples) && !samples[j].At.After(r) {
			cur = &samples[j]
			j++
		}
		if cur != nil {
			q := *cur
			q.At = r
			out = append(out, q)
		}
	}
	return out
}
