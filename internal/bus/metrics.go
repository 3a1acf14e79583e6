package bus

import (
	"context"
	"time"
)

// Metrics receives what the bus counts for the operator. The server gives a
// Prometheus implementation; a nil Metrics in Config counts nothing. Every
// method is called on hot paths and must be cheap and safe for concurrent
// use.
type Metrics interface {
	// Published counts messages accepted by publish (duplicates included).
	Published(n int)
	// Delivered counts deliveries claimed by receives.
	Delivered(n int)
	// Acked counts acknowledgements that took effect.
	Acked(n int)
	// Released counts deliveries released before their visibility ran out:
	// nacks that took effect, and deliveries given back because their
	// answer could not be written.
	Released(n int)
	// DeadLettered counts messages moved to dead letters: by the sweeper,
	// by a receive before its claim, and by a nack on the last attempt.
	DeadLettered(n int)
	// Redriven counts dead letters moved back to their queue.
	Redriven(n int)
	// LongPollWaiting adds delta (+1 or -1) to the receives waiting now.
	LongPollWaiting(delta int)
	// StoreOperation records how long one call of the store took; op is a
	// fixed name (the Store method in snake case).
	StoreOperation(op string, d time.Duration)
}

// noMetrics counts nothing.
type noMetrics struct{}

func (noMetrics) Published(int)                        {}
func (noMetrics) Delivered(int)                        {}
func (noMetrics) Acked(int)                            {}
func (noMetrics) Released(int)                         {}
func (noMetrics) DeadLettered(int)                     {}
func (noMetrics) Redriven(int)                         {}
func (noMetrics) LongPollWaiting(int)                  {}
func (noMetrics) StoreOperation(string, time.Duration) {}

// Store operation names of StoreOperation.
const (
	OpUpdate            = "update"
	OpView              = "view"
	OpMessagePublish    = "message_publish"
	OpMessageReceive    = "message_receive"
	OpMessageAck        = "message_ack"
	OpMessageNack       = "message_nack"
	OpQueueStats        = "queue_stats"
	OpQueueStatsMany    = "queue_stats_many"
	OpQueueGauges       = "queue_gauges"
	OpQueuePurge        = "queue_purge"
	OpDeadLetterList    = "dead_letter_list"
	OpDeadLetterRedrive = "dead_letter_redrive"
	OpMaintain          = "maintain"
)

// timedStore times the calls the bus makes to its store. Listen, Ping and
// Close pass through untimed.
type timedStore struct {
	Store
	m Metrics
}

// timeOp returns a func that records the time since now under op.
func (t timedStore) timeOp(op string) func() {
	start := time.Now()
	return func() { t.m.StoreOperation(op, time.Since(start)) }
}

func (t timedStore) Update(ctx context.Context, fn func(tx Tx) error) error {
	defer t.timeOp(OpUpdate)()
	return t.Store.Update(ctx, fn)
}

func (t timedStore) View(ctx context.Context, fn func(tx Tx) error) error {
	defer t.timeOp(OpView)()
	return t.Store.View(ctx, fn)
}

func (t timedStore) MessagePublish(ctx context.Context, p *PublishParams) ([]PublishOutcome, error) {
	defer t.timeOp(OpMessagePublish)()
	return t.Store.MessagePublish(ctx, p)
}

func (t timedStore) MessageReceive(ctx context.Context, p *ReceiveParams) (*ReceiveResult, error) {
	defer t.timeOp(OpMessageReceive)()
	return t.Store.MessageReceive(ctx, p)
}

func (t timedStore) MessageAck(ctx context.Context, p *SettleParams) ([]SettleResult, error) {
	defer t.timeOp(OpMessageAck)()
	return t.Store.MessageAck(ctx, p)
}

func (t timedStore) MessageNack(ctx context.Context, p *SettleParams) ([]SettleResult, error) {
	defer t.timeOp(OpMessageNack)()
	return t.Store.MessageNack(ctx, p)
}

func (t timedStore) QueueStats(ctx context.Context, queueID string, now time.Time) (QueueStats, error) {
	defer t.timeOp(OpQueueStats)()
	return t.Store.QueueStats(ctx, queueID, now)
}

func (t timedStore) QueueStatsMany(ctx context.Context, queueIDs []string, now time.Time) (map[string]QueueStats, error) {
	defer t.timeOp(OpQueueStatsMany)()
	return t.Store.QueueStatsMany(ctx, queueIDs, now)
}

func (t timedStore) QueueGauges(ctx context.Context, now time.Time) ([]QueueGauge, error) {
	defer t.timeOp(OpQueueGauges)()
	return t.Store.QueueGauges(ctx, now)
}

func (t timedStore) QueuePurge(ctx context.Context, p *PurgeParams) (int, error) {
	defer t.timeOp(OpQueuePurge)()
	return t.Store.QueuePurge(ctx, p)
}

func (t timedStore) DeadLetterList(ctx context.Context, queueID string, limit int, after int64) ([]DeadLetter, error) {
	defer t.timeOp(OpDeadLetterList)()
	return t.Store.DeadLetterList(ctx, queueID, limit, after)
}

func (t timedStore) DeadLetterRedrive(ctx context.Context, p *RedriveParams) (int, error) {
	defer t.timeOp(OpDeadLetterRedrive)()
	return t.Store.DeadLetterRedrive(ctx, p)
}

func (t timedStore) Maintain(ctx context.Context, p *MaintainParams) (*MaintainResult, error) {
	defer t.timeOp(OpMaintain)()
	return t.Store.Maintain(ctx, p)
}

// QueueGauges counts every consumer queue now, for a metrics scrape.
func (s *Service) QueueGauges(ctx context.Context) ([]QueueGauge, error) {
	return s.store.QueueGauges(ctx, s.clock.Now())
}
