package bus

import (
	"context"
	"fmt"
	"time"
)

// Queue samples: the bus records every consumer queue's counts itself at a
// fixed interval and keeps them for a day, so the portal can draw a queue's
// recent history without an outside metrics system.
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
// interval (a queue already sampled in it keeps its sample), and deletes
// the samples older than the keep time. It returns how many samples it
// wrote.
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
