package bench

// sombus on PostgreSQL next to a plain PostgreSQL queue table on the same
// database, phase by phase, so that every run gives the ratio of the two:
//
//	go test -run '^$' -bench PostgresPhases -benchtime 5000x ./internal/bench/
//
// Phases (1 KiB payloads over 1,000 stories):
//
//   - single: b.N messages published one per request by 8 publishers;
//   - batch: b.N messages published 100 per request by 8 publishers;
//   - drain: b.N messages published beforehand (untimed), then taken by 8
//     receivers, up to 10 at a time, each batch acknowledged before the
//     next receive.
//   - drain-queues (sombus only): the drain over 4 consumer connections,
//     each subscribed to every message (b.N/4 published, b.N queued in
//     all; b.N rounded up to a multiple of 4), 2 of the 8 receivers on
//     each queue: a node serving several queues at once, where the
//     database's CPU, not one queue's chain of runs, bounds the rate.
//
// Systems:
//
//   - plain: a table (id bigserial, story, visible_at, payload) used the
//     usual way, by direct SQL from the same process: an INSERT per message
//     (or one INSERT of 100 rows), a receive that claims up to 10 rows with
//     FOR UPDATE SKIP LOCKED and moves their visibility (an UPDATE), and an
//     ack that deletes them by id. Each statement is a transaction of its
//     own that waits for its WAL flush, as sombus's do.
//   - plain-delete (drain only): the receive deletes the rows it takes
//     (DELETE … RETURNING of the SKIP LOCKED rows), no ack: at-most-once,
//     the cheapest drain a table allows.
//   - sombus/nodes=1 and sombus/nodes=2: in-process nodes over HTTP, the
//     workers spread over the nodes (as BenchmarkMessagePath).
//
// msgs/s is b.N over the timed phase. SOMBUS_BENCH_WAL=1 adds wal-B/msg,
// the WAL the whole cluster wrote over the phase per message (meaningful
// while nothing else writes to the cluster), and SOMBUS_BENCH_CPU=1 adds
// proc-cpu-us/msg, the CPU of this process (nodes and load client, or the
// plain table's client) per message, and pg-cpu-us/msg, the PostgreSQL
// server's, read from /proc (a server on this machine, its processes
// readable: otherwise 0; it counts whatever else the server ran
// meanwhile). On the 2 cores of the usual machine the two together bound
// the rate. With SOMBUS_BENCH_COMMITS=1 the
// sombus systems also report commits/msg: the growth of the database's
// pg_stat_database.xact_commit over the timed phase, per message, less the
// nodes' idle rate (maintenance, sampling, listener checks) measured just
// before. PostgreSQL publishes a backend's counts up to about 10 s late,
// so each figure costs 27 s of waiting, and the database should be one
// that nothing else uses meanwhile (SOMBUS_TEST_POSTGRES_URL).
// SOMBUS_BENCH_CPUPROFILE and SOMBUS_BENCH_TRACE (bench_test.go) profile
// the timed phase of the sombus systems only (select one sub-benchmark).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

const (
	phPublishers = 8   // concurrent publishers
	phReceivers  = 8   // concurrent receivers
	phBatch      = 100 // messages per batch publish
	phTake       = 10  // messages per receive
	phQueues     = 4   // consumer connections of drain-queues
)

// phPayload is the 1 KiB payload of every message.
var phPayload = []byte(strings.Repeat("x", mpPayload))

func BenchmarkPostgresPhases(b *testing.B) {
	for _, phase := range []string{"single", "batch", "drain", "drain-queues"} {
		b.Run("phase="+phase, func(b *testing.B) {
			if phase != "drain-queues" {
				b.Run("system=plain", func(b *testing.B) { plainPhase(b, phase, false) })
			}
			if phase == "drain" {
				b.Run("system=plain-delete", func(b *testing.B) { plainPhase(b, phase, true) })
			}
			for _, n := range []int{1, 2} {
				b.Run(fmt.Sprintf("system=sombus/nodes=%d", n), func(b *testing.B) {
					url := pgtest.URL(b)
					nodes, p := mpNodes(b, url, n)
					pairs := []*servertest.Pair{p}
					if phase == "drain-queues" {
						u := map[string]any{"quota_tier": "unlimited"}
						for range phQueues - 1 {
							pairs = append(pairs, nodes[0].AddConsumer(p, u))
						}
					}
					sombusPhase(b, phase, url, nodes, pairs)
				})
			}
		})
	}
}

// phWork runs workers goroutines that call fn(ctx, w) until it returns
// false or an error (the first error stops every worker and is returned)
// or phStop(ctx) is called (the calls still running are cut short and
// their errors ignored).
func phWork(workers int, fn func(ctx context.Context, w int) (bool, error)) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = context.WithValue(ctx, phStopKey{}, cancel)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				more, err := fn(ctx, w)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				if !more {
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

type phStopKey struct{}

// phStop ends the phWork whose context ctx is: the work is done.
func phStop(ctx context.Context) { ctx.Value(phStopKey{}).(context.CancelFunc)() }

// phReport reports msgs/s of the timed phase.
func phReport(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(0, "ns/op") // ns/op of a whole phase says nothing more
}

// --- plain table ------------------------------------------------------

func plainPhase(b *testing.B, phase string, deleteOnReceive bool) {
	ctx := context.Background()
	url := pgtest.URL(b)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 20 // a node's default pool
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE plain_queue (
			id         bigserial PRIMARY KEY,
			story      text NOT NULL,
			visible_at bigint NOT NULL,
			payload    bytea NOT NULL
		)`); err != nil {
		b.Fatal(err)
	}
	total := int64(b.N)
	var next atomic.Int64
	var m phaseMeters
	insertBatches := func() error {
		return phWork(phPublishers, func(ctx context.Context, _ int) (bool, error) {
			end := next.Add(phBatch)
			start := end - phBatch
			if start >= total {
				return false, nil
			}
			var stories []string
			var payloads [][]byte
			for i := start; i < min(end, total); i++ {
				stories = append(stories, fmt.Sprintf("story-%d", i%mpStories))
				payloads = append(payloads, phPayload)
			}
			_, err := pool.Exec(ctx, `INSERT INTO plain_queue (story, visible_at, payload)
				SELECT s, 0, p FROM unnest($1::text[], $2::bytea[]) AS t(s, p)`, stories, payloads)
			return true, err
		})
	}
	switch phase {
	case "single":
		m = startMeters(b, url, false)
		b.ResetTimer()
		err = phWork(phPublishers, func(ctx context.Context, _ int) (bool, error) {
			i := next.Add(1) - 1
			if i >= total {
				return false, nil
			}
			_, err := pool.Exec(ctx, `INSERT INTO plain_queue (story, visible_at, payload) VALUES ($1, 0, $2)`,
				fmt.Sprintf("story-%d", i%mpStories), phPayload)
			return true, err
		})
	case "batch":
		m = startMeters(b, url, false)
		b.ResetTimer()
		err = insertBatches()
	case "drain":
		b.StopTimer()
		if err := insertBatches(); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE plain_queue`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		m = startMeters(b, url, false)
		b.ResetTimer()
		var acked atomic.Int64
		err = phWork(phReceivers, func(ctx context.Context, _ int) (bool, error) {
			if acked.Load() >= total {
				return false, nil
			}
			now := time.Now().UnixMilli()
			var ids []int64
			if deleteOnReceive {
				rows, err := pool.Query(ctx, `WITH picked AS (
						SELECT id FROM plain_queue ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
					)
					DELETE FROM plain_queue q USING picked WHERE q.id = picked.id
					RETURNING q.id, q.story, q.payload`, phTake)
				if err != nil {
					return false, err
				}
				ids, err = scanPlain(rows)
				if err != nil {
					return false, err
				}
			} else {
				rows, err := pool.Query(ctx, `WITH picked AS (
						SELECT id FROM plain_queue WHERE visible_at <= $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED
					)
					UPDATE plain_queue q SET visible_at = $3 FROM picked WHERE q.id = picked.id
					RETURNING q.id, q.story, q.payload`, now, phTake, now+30_000)
				if err != nil {
					return false, err
				}
				if ids, err = scanPlain(rows); err != nil {
					return false, err
				}
				if len(ids) > 0 {
					if _, err := pool.Exec(ctx, `DELETE FROM plain_queue WHERE id = ANY($1)`, ids); err != nil {
						return false, err
					}
				}
			}
			if len(ids) == 0 {
				time.Sleep(time.Millisecond) // the others hold the rest
			}
			if acked.Add(int64(len(ids))) >= total {
				phStop(ctx)
			}
			return true, nil
		})
	}
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	phReport(b)
	m.report(b)
}

// scanPlain reads the rows a plain receive took and returns their ids.
func scanPlain(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close()
}) ([]int64, error) {
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		var story string
		var payload []byte
		if err := rows.Scan(&id, &story, &payload); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// --- sombus -----------------------------------------------------------

func sombusPhase(b *testing.B, phase, url string, nodes []*servertest.Node, pairs []*servertest.Pair) {
	p := pairs[0]
	total := int64(b.N)
	published := total // every message goes to each pair's queue
	if phase == "drain-queues" {
		published = (total + int64(len(pairs)) - 1) / int64(len(pairs))
		total = published * int64(len(pairs))
	}
	var next, msgID atomic.Int64
	env := func(i int64) map[string]any {
		return servertest.Envelope(fmt.Sprintf("ph-%d", msgID.Add(1)), fmt.Sprintf("story-%d", i%mpStories),
			map[string]any{"data": mpData})
	}
	batchPath := "/v1/tenants/" + p.WS + "/messages/batch"
	publishBatches := func() error {
		return phWork(phPublishers, func(ctx context.Context, w int) (bool, error) {
			end := next.Add(phBatch)
			start := end - phBatch
			if start >= published {
				return false, nil
			}
			envs := make([]any, 0, phBatch)
			for i := start; i < min(end, published); i++ {
				envs = append(envs, env(i))
			}
			r, err := nodes[w%len(nodes)].Try(ctx, "POST", batchPath, p.ProducerTok, map[string]any{"messages": envs})
			if err == nil && (r.Status != 200 || strings.Contains(string(r.Body), `"accepted":false`)) {
				err = fmt.Errorf("publish batch: %d %.300s", r.Status, r.Body)
			}
			return true, err
		})
	}
	var err error
	var m phaseMeters
	stopProfile := func() {}
	switch phase {
	case "single":
		m = startMeters(b, url, true)
		stopProfile = profileTimed(b)
		b.ResetTimer()
		err = phWork(phPublishers, func(ctx context.Context, w int) (bool, error) {
			i := next.Add(1) - 1
			if i >= total {
				return false, nil
			}
			r, err := nodes[w%len(nodes)].Try(ctx, "POST", p.PublishPath(), p.ProducerTok, env(i))
			if err == nil && r.Status != 202 && r.Status != 200 {
				err = fmt.Errorf("publish: %d %.300s", r.Status, r.Body)
			}
			return true, err
		})
	case "batch":
		m = startMeters(b, url, true)
		stopProfile = profileTimed(b)
		b.ResetTimer()
		err = publishBatches()
	case "drain", "drain-queues":
		b.StopTimer()
		if err := publishBatches(); err != nil {
			b.Fatal(err)
		}
		m = startMeters(b, url, true)
		stopProfile = profileTimed(b)
		b.StartTimer()
		b.ResetTimer()
		var acked atomic.Int64
		err = phWork(phReceivers, func(ctx context.Context, w int) (bool, error) {
			if acked.Load() >= total {
				return false, nil
			}
			// Receiver w reads queue w % len(pairs) through node
			// w / len(pairs) % len(nodes): each queue is read through
			// every node.
			p := pairs[w%len(pairs)]
			n := nodes[w/len(pairs)%len(nodes)]
			query := fmt.Sprintf("%s?max=%d&wait=1", p.MessagesPath(), phTake)
			r, err := n.Try(ctx, "GET", query, p.ConsumTok, nil)
			if err != nil {
				return false, err
			}
			var out struct {
				Messages []servertest.Message `json:"messages"`
			}
			if r.Status != 200 || json.Unmarshal(r.Body, &out) != nil {
				return false, fmt.Errorf("receive: %d %.300s", r.Status, r.Body)
			}
			if len(out.Messages) == 0 {
				return true, nil
			}
			hs := make([]string, len(out.Messages))
			for i, m := range out.Messages {
				hs[i] = m.ReceiptHandle
			}
			a, err := n.Try(ctx, "POST", p.SettlePath("ack"), p.ConsumTok, map[string]any{"receipt_handles": hs})
			if err == nil && (a.Status != 200 || strings.Contains(string(a.Body), "ReceiptHandleIsInvalid")) {
				err = fmt.Errorf("ack: %d %.300s", a.Status, a.Body)
			}
			if err == nil && acked.Add(int64(len(hs))) >= total {
				phStop(ctx) // the receivers still waiting are cut short
			}
			return true, err
		})
	}
	b.StopTimer()
	stopProfile()
	if err != nil {
		b.Fatal(err)
	}
	phReport(b)
	m.report(b)
}

// phaseMeters are the meters a timed phase reports with, each nil unless
// its variable turns it on.
type phaseMeters struct {
	commits *commitMeter
	wal     *walMeter
	cpu     *cpuMeter
}

// startMeters starts the meters turned on (the commit count only with
// commits: the sombus systems); the caller resets the timer after it.
func startMeters(b *testing.B, url string, commits bool) phaseMeters {
	var m phaseMeters
	if commits {
		m.commits = startCommits(b, url)
	}
	m.wal = startWAL(b, url)
	m.cpu = startCPU(b)
	return m
}

func (m phaseMeters) report(b *testing.B) {
	m.commits.report(b)
	m.wal.report(b)
	m.cpu.report(b)
}

// commitMeter counts the database's commits over a timed phase
// (SOMBUS_BENCH_COMMITS).
type commitMeter struct {
	conn  *pgx.Conn
	start int64     // xact_commit at the phase's start
	at    time.Time // when start was read
	rate  float64   // idle commits a second just before
}

// xactCommit reads the database's published commit count.
func (m *commitMeter) xactCommit(b *testing.B) int64 {
	var n int64
	if err := m.conn.QueryRow(context.Background(), `SELECT xact_commit FROM pg_stat_database
		WHERE datname = current_database()`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// meterConn connects to the database at url for a meter that env turns on;
// nil when env is not set, and for the first run of one message, which go
// test makes before the real one. The connection closes with the benchmark.
func meterConn(b *testing.B, env, url string) *pgx.Conn {
	if os.Getenv(env) == "" || b.N <= 1 {
		return nil
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// startCommits waits until the commits so far are published, measures the
// idle rate, and returns the meter (nil without SOMBUS_BENCH_COMMITS, and
// for the first run of one message, which go test makes before the real
// one). The caller resets the benchmark's timer after it.
func startCommits(b *testing.B, url string) *commitMeter {
	conn := meterConn(b, "SOMBUS_BENCH_COMMITS", url)
	if conn == nil {
		return nil
	}
	m := &commitMeter{conn: conn}
	time.Sleep(11 * time.Second)
	c1, t1 := m.xactCommit(b), time.Now()
	time.Sleep(5 * time.Second)
	m.start, m.at = m.xactCommit(b), time.Now()
	m.rate = float64(m.start-c1) / m.at.Sub(t1).Seconds()
	return m
}

// report waits until the phase's commits are published and reports
// commits/msg, less the idle rate over the time since the start.
func (m *commitMeter) report(b *testing.B) {
	if m == nil {
		return
	}
	time.Sleep(11 * time.Second)
	end := m.xactCommit(b)
	idle := m.rate * time.Since(m.at).Seconds()
	b.ReportMetric((float64(end-m.start)-idle)/float64(b.N), "commits/msg")
	b.ReportMetric(m.rate, "idle-commits/s")
}

// walMeter measures the WAL the database cluster wrote over a timed phase
// (SOMBUS_BENCH_WAL): pg_current_wal_lsn() before and after, per message.
// The LSN is the whole cluster's, so the figure holds only while nothing
// else writes to it.
type walMeter struct {
	conn  *pgx.Conn
	start int64
}

func (m *walMeter) lsn(b *testing.B) int64 {
	var n int64
	if err := m.conn.QueryRow(context.Background(),
		`SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// startWAL returns the meter (nil without SOMBUS_BENCH_WAL and for the
// first run of one message); the caller resets the timer after it.
func startWAL(b *testing.B, url string) *walMeter {
	conn := meterConn(b, "SOMBUS_BENCH_WAL", url)
	if conn == nil {
		return nil
	}
	m := &walMeter{conn: conn}
	m.start = m.lsn(b)
	return m
}

// report reports WAL bytes a message over the phase.
func (m *walMeter) report(b *testing.B) {
	if m == nil {
		return
	}
	b.ReportMetric(float64(m.lsn(b)-m.start)/float64(b.N), "wal-B/msg")
}

// cpuMeter measures the CPU time over a timed phase (SOMBUS_BENCH_CPU=1) of
// this process (the nodes and the load client, or the plain table's
// client) and of the PostgreSQL server, when the server runs on this
// machine and its processes' /proc entries can be read: every process
// named postgres, plus what the postmaster's exited children used. Both
// per message, in microseconds.
type cpuMeter struct {
	self, pg time.Duration
}

func (m *cpuMeter) read() {
	m.self = time.Duration(processCPU())
	m.pg = pgServerCPU()
}

// pgServerCPU sums the CPU of the processes named postgres (a tick is
// 10 ms), with the exited children of the one whose parent is not one.
func pgServerCPU() time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type proc struct{ ppid, own, children int64 }
	procs := map[int64]proc{}
	for _, e := range ents {
		pid, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		j := bytes.IndexByte(stat, '(')
		if i < 0 || j < 0 || string(stat[j+1:i]) != "postgres" {
			continue
		}
		f := strings.Fields(string(stat[i+1:])) // state ppid ... utime(12) stime(13) cutime(14) cstime(15)
		if len(f) < 16 {
			continue
		}
		n := func(k int) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
		procs[pid] = proc{ppid: n(1), own: n(11) + n(12), children: n(13) + n(14)}
	}
	var ticks int64
	for _, p := range procs {
		ticks += p.own
		if _, ok := procs[p.ppid]; !ok {
			ticks += p.children // the postmaster: its exited backends
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// startCPU returns the meter (nil without SOMBUS_BENCH_CPU and for the
// first run of one message); the caller resets the timer after it.
func startCPU(b *testing.B) *cpuMeter {
	if os.Getenv("SOMBUS_BENCH_CPU") == "" || b.N <= 1 {
		return nil
	}
	m := &cpuMeter{}
	m.read()
	return m
}

// report reports the CPU a message of this process and of the server.
func (m *cpuMeter) report(b *testing.B) {
	if m == nil {
		return
	}
	end := &cpuMeter{}
	end.read()
	b.ReportMetric(float64((end.self-m.self).Microseconds())/float64(b.N), "proc-cpu-us/msg")
	b.ReportMetric(float64((end.pg-m.pg).Microseconds())/float64(b.N), "pg-cpu-us/msg")
}
