package httpapi

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the HTTP API's Prometheus series.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	tokens   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sombus_http_requests_total", Help: "HTTP requests by route pattern and status.",
		}, []string{"route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sombus_http_request_duration_seconds", Help: "HTTP request duration by route pattern (long polls included).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20},
		}, []string{"route"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sombus_token_requests_total", Help: `Token requests by result: "issued", or the OAuth error code of the refusal.`,
		}, []string{"result"}),
	}
	reg.MustRegister(m.requests, m.duration, m.tokens)
	return m
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
	route  *routeMetrics
	start  time.Time
	parked bool // a long poll that answers later, off the handler (see parked)
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// routeMetrics are one route's series.
type routeMetrics struct {
	requests *prometheus.CounterVec
	route    string
	duration prometheus.Observer
	byStatus [600]atomic.Pointer[prometheus.Counter] // by status code
}

// counter is the route's request counter of status. The route's series
// are looked up once, not per request (a lookup by label values
// allocates); requests by status are cached as they come.
func (m *routeMetrics) counter(status int) prometheus.Counter {
	if status < 0 || status >= len(m.byStatus) {
		return m.requests.WithLabelValues(m.route, strconv.Itoa(status))
	}
	if c := m.byStatus[status].Load(); c != nil {
		return *c
	}
	c := m.requests.WithLabelValues(m.route, strconv.Itoa(status))
	m.byStatus[status].Store(&c)
	return c
}

// done counts a request that started at start and was answered status.
func (m *routeMetrics) done(status int, start time.Time) {
	m.counter(status).Inc()
	m.duration.Observe(time.Since(start).Seconds())
}

func (m *metrics) instrument(route string, h http.Handler) http.Handler {
	rm := &routeMetrics{requests: m.requests, route: route, duration: m.duration.WithLabelValues(route)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, route: rm, start: time.Now()}
		h.ServeHTTP(sw, r)
		if sw.parked {
			return // counted when it is answered
		}
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		rm.done(sw.status, sw.start)
	})
}
