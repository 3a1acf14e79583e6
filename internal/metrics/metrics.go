// Package metrics holds the Prometheus series of a sombus node that are not
// the HTTP API's own: the bus's counters, store timings, long polls and the
// per-queue gauges read at each scrape. docs/metrics.md lists them all.
package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sombus/sombus/internal/bus"
)

// Bus implements bus.Metrics with Prometheus counters.
type Bus struct {
	published, delivered, acked, released, deadLettered, redriven prometheus.Counter
	waiting                                                       prometheus.Gauge
	storeDuration                                                 *prometheus.HistogramVec
}

var _ bus.Metrics = (*Bus)(nil)

// NewBus registers the bus's series with reg.
func NewBus(reg prometheus.Registerer) *Bus {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &Bus{
		published:    counter("sombus_messages_published_total", "Messages accepted by publish (duplicates within the dedup window included)."),
		delivered:    counter("sombus_messages_delivered_total", "Deliveries claimed by receives (redeliveries included)."),
		acked:        counter("sombus_messages_acked_total", "Acknowledgements answered OK."),
		released:     counter("sombus_messages_released_total", "Deliveries released before their visibility ran out: nacks answered OK, and deliveries given back because their answer could not be written."),
		deadLettered: counter("sombus_messages_dead_lettered_total", "Messages moved to the dead letters after their last attempt (by the sweeper, a receive or a nack)."),
		redriven:     counter("sombus_messages_redriven_total", "Dead letters moved back to their queue by redrive."),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sombus_long_polls_waiting", Help: "Receives waiting now for a message (long polls).",
		}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sombus_store_operation_duration_seconds", Help: "Duration of the bus's store calls by operation.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"operation"}),
	}
	reg.MustRegister(m.published, m.delivered, m.acked, m.released, m.deadLettered, m.redriven, m.waiting, m.storeDuration)
	return m
}

func add(c prometheus.Counter, n int) {
	if n > 0 {
		c.Add(float64(n))
	}
}

// Published counts accepted messages.
func (m *Bus) Published(n int) { add(m.published, n) }

// Delivered counts deliveries.
func (m *Bus) Delivered(n int) { add(m.delivered, n) }

// Acked counts acknowledgements.
func (m *Bus) Acked(n int) { add(m.acked, n) }

// Released counts releases.
func (m *Bus) Released(n int) { add(m.released, n) }

// DeadLettered counts dead-letter moves.
func (m *Bus) DeadLettered(n int) { add(m.deadLettered, n) }

// Redriven counts redriven dead letters.
func (m *Bus) Redriven(n int) { add(m.redriven, n) }

// LongPollWaiting moves the gauge of waiting receives.
func (m *Bus) LongPollWaiting(delta int) { m.waiting.Add(float64(delta)) }

// StoreOperation records a store call's duration.
func (m *Bus) StoreOperation(op string, d time.Duration) {
	m.storeDuration.WithLabelValues(op).Observe(d.Seconds())
}

// GaugeTimeout bounds the store query of one scrape.
const GaugeTimeout = 5 * time.Second

// Queues is a Collector of every consumer queue's counts, read with one
// store query per scrape. A failed query is logged and counted in
// sombus_queue_gauges_errors_total; the scrape then has no queue series but
// still succeeds.
type Queues struct {
	read   func(ctx context.Context) ([]bus.QueueGauge, error)
	log    *slog.Logger
	errors prometheus.Counter

	ready, inFlight, delayed, dead, age *prometheus.Desc
}

// NewQueues registers the queue gauges with reg; read is called once per
// scrape (bus.Service.QueueGauges).
func NewQueues(reg prometheus.Registerer, read func(ctx context.Context) ([]bus.QueueGauge, error), log *slog.Logger) *Queues {
	labels := []string{"workspace_id", "connection_id"}
	q := &Queues{
		read: read, log: log,
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sombus_queue_gauges_errors_total", Help: "Scrapes whose read of the queue gauges failed (the scrape then has no queue series).",
		}),
		ready:    prometheus.NewDesc("sombus_queue_messages_ready", "Messages of a consumer queue ready to be received.", labels, nil),
		inFlight: prometheus.NewDesc("sombus_queue_messages_in_flight", "Messages of a consumer queue received and not yet acknowledged, released or timed out.", labels, nil),
		delayed:  prometheus.NewDesc("sombus_queue_messages_delayed", "Messages of a consumer queue released with a delay that has not run out.", labels, nil),
		dead:     prometheus.NewDesc("sombus_queue_dead_letters", "Dead letters of a consumer queue.", labels, nil),
		age:      prometheus.NewDesc("sombus_queue_oldest_ready_age_seconds", "Age of the oldest ready message of a consumer queue (0 when none is ready).", labels, nil),
	}
	reg.MustRegister(q)
	return q
}

// Describe sends the gauges' descriptions.
func (q *Queues) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{q.ready, q.inFlight, q.delayed, q.dead, q.age} {
		ch <- d
	}
	q.errors.Describe(ch)
}

// Collect reads every queue's counts in one query; the error count comes
// after, so that it counts this scrape's failure.
func (q *Queues) Collect(ch chan<- prometheus.Metric) {
	defer q.errors.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), GaugeTimeout)
	defer cancel()
	gs, err := q.read(ctx)
	if err != nil {
		q.errors.Inc()
		q.log.Warn("metrics: read queue gauges", "err", err)
		return
	}
	for _, g := range gs {
		l := []string{g.WorkspaceID, g.ConnectionID}
		ch <- prometheus.MustNewConstMetric(q.ready, prometheus.GaugeValue, float64(g.Ready), l...)
		ch <- prometheus.MustNewConstMetric(q.inFlight, prometheus.GaugeValue, float64(g.InFlight), l...)
		ch <- prometheus.MustNewConstMetric(q.delayed, prometheus.GaugeValue, float64(g.Delayed), l...)
		ch <- prometheus.MustNewConstMetric(q.dead, prometheus.GaugeValue, float64(g.DeadLetters), l...)
		ch <- prometheus.MustNewConstMetric(q.age, prometheus.GaugeValue, g.OldestReadyAgeSeconds, l...)
	}
}
