package sqlite

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

// The backlog shapes of the depth goal: an empty queue, a backlog over
// many shallow stories (10 messages a story) and the same backlog over 100
// deep stories.
type depthShape struct {
	name    string
	depth   int
	stories int
}

// depthShapes are the shapes at the depths SOMBUS_BENCH_DEPTHS lists
// (comma-separated), by default 30,000, plus a million with
// SOMBUS_BENCH_MILLION set.
func depthShapes() []depthShape {
	depths := []int{30000}
	if v := os.Getenv("SOMBUS_BENCH_DEPTHS"); v != "" {
		depths = depths[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				panic("SOMBUS_BENCH_DEPTHS: " + v)
			}
			depths = append(depths, n)
		}
	}
	if os.Getenv("SOMBUS_BENCH_MILLION") != "" && !slices.Contains(depths, 1000000) {
		depths = append(depths, 1000000)
	}
	out := []depthShape{{name: "empty"}}
	for _, d := range depths {
		out = append(out,
			depthShape{name: fmt.Sprintf("shallow=%d", d), depth: d, stories: max(1, d/10)},
			depthShape{name: fmt.Sprintf("deep=%d", d), depth: d, stories: 100})
	}
	return out
}

// bulkFill queues n messages over stories stories of queue q directly in
// the tables, as publishing them one call after another in message order
// (message i goes to story "b<i mod stories>") would have written them:
// the stories rows, the message rows in the same order (so the same row
// ids and pages), the dedup records and the queue's counter (the
// triggers). Message i is enqueued at t0 - n + i ms, one publish call a
// millisecond up to just before t0, so the claim order (oldest head
// first) is the publish order, as with a real clock. Far faster than the store API for a million messages. The
// writer's index of the queue is dropped, so it loads from the tables.
func bulkFill(b testing.TB, s *Store, q, prod string, n, stories int) {
	b.Helper()
	ctx := context.Background()
	if n == 0 {
		return
	}
	now := ms(t0) - int64(n) // the enqueue time of message 0
	// The message rows get the ids base+i; story j's head is message j,
	// its tail the last i with i mod stories = j.
	var first, base int64
	err := s.w.do(ctx, func(d *dbq) error {
		d.heads.drop(q)
		if err := d.row(`SELECT coalesce(max(id), 0) + 1 FROM messages`).Scan(&base); err != nil {
			return err
		}
		last := func(j string) string { return "(" + j + " + ((?3 - 1 - " + j + ") / ?1) * ?1)" }
		if _, err := d.exec(`WITH RECURSIVE k(j) AS (SELECT 0 UNION ALL SELECT j+1 FROM k WHERE j+1 < ?1)
			INSERT INTO stories(queue_id, story_key, head_seq, tail_seq, head_id, tail_id, visible_at, receive_count, nonce, delayed)
			SELECT ?2, 'b' || j, 1, `+last("j")+` / ?1 + 1, ?4 + j, ?4 + `+last("j")+`, ?5 + j, 0, 0, 0 FROM k ORDER BY j`,
			stories, q, n, base, now); err != nil {
			return err
		}
		return d.row(`SELECT min(id) FROM stories WHERE queue_id = ?`, q).Scan(&first)
	})
	if err != nil {
		b.Fatal(err)
	}
	const chunk = 20000
	for lo := 0; lo < n; lo += chunk {
		hi := min(n, lo+chunk)
		err := s.w.do(ctx, func(d *dbq) error {
			d.heads.drop(q)
			d.heads.nextMsg = 0
			if _, err := d.exec(`WITH RECURSIVE k(i) AS (SELECT ?1 UNION ALL SELECT i+1 FROM k WHERE i+1 < ?2)
				INSERT INTO messages(`+messageCols+`)
				SELECT ?9 + i, ?3 + i % ?4, i / ?4 + 1, CASE WHEN i < ?4 THEN 0 ELSE ?9 + i - ?4 END, ?5, 'b' || i,
					'story.context', 'som.story.context', 'b' || (i % ?4), ?6, ?7 + i,
					CAST('{"message_id":"b' || i || '","payload":"' || ?8 || '"}' AS BLOB) FROM k ORDER BY i`,
				lo, hi, first, stories, q, prod, now, payload1K, base); err != nil {
				return err
			}
			_, err := d.exec(`WITH RECURSIVE k(i) AS (SELECT ?1 UNION ALL SELECT i+1 FROM k WHERE i+1 < ?2)
				INSERT INTO dedup(producer_id, message_id, accepted_at, deliveries) SELECT ?3, 'b' || i, ?4 + i, 1 FROM k ORDER BY i`,
				lo, hi, prod, now)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	// Settle the file as a long-running node would have: the WAL
	// checkpointed into the database.
	s.w.checkpoint("TRUNCATE")
}

// depthTemplate is a store file filled once per process for a backlog
// shape, copied for each run of a benchmark (a million messages take a
// while to write).
type depthTemplate struct {
	path        string
	ws, prod, q string
}

var depthTemplates = map[[2]int]*depthTemplate{}

// removeDepthTemplates removes the depth benchmarks' template files
// (TestMain, at the end).
func removeDepthTemplates() {
	for _, t := range depthTemplates {
		_ = os.RemoveAll(filepath.Dir(t.path))
	}
}

// depthStore opens a store on a copy of a file holding n messages over
// stories stories in one queue (bulkFill), made once per process.
func depthStore(b *testing.B, n, stories int) (s *Store, ws, prod, q string) {
	b.Helper()
	key := [2]int{n, stories}
	t := depthTemplates[key]
	if t == nil {
		dir, err := os.MkdirTemp("", "sombus-depth-")
		if err != nil {
			b.Fatal(err)
		}
		t = &depthTemplate{path: filepath.Join(dir, "t.db")}
		ts, err := Open(context.Background(), t.path, nil)
		if err != nil {
			b.Fatal(err)
		}
		t.ws, t.prod, t.q = setupQueueB(b, ts)
		bulkFill(b, ts, t.q, t.prod, n, stories)
		if err := ts.Close(); err != nil {
			b.Fatal(err)
		}
		depthTemplates[key] = t
	}
	path := filepath.Join(b.TempDir(), "b.db")
	for _, suffix := range []string{"", "-wal"} {
		err := copySynced(path+suffix, t.path+suffix)
		if err != nil && !(suffix != "" && os.IsNotExist(err)) {
			b.Fatal(err)
		}
	}
	s, err := Open(context.Background(), path, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s, t.ws, t.prod, t.q
}

// copySynced copies a template file to path and fsyncs the copy: a node's
// file was written long before it serves, and a copy left in the page
// cache would be flushed by the first fsync that touches it (SQLite's
// first checkpoint, or the file system's journal commit behind a WAL
// fsync), a stall of a second for a million messages that a real node
// does not have.
//
// The copy goes from file to file (io.Copy: copy_file_range in the
// kernel, or else a small buffer). Read whole into one slice (as it once
// was), a million messages' file left 1.5 GiB of garbage on the heap,
// which set the collector's next goal near 3 GiB: the timed rounds then
// grew the heap into fresh memory, page faults and the kernel's zeroing
// of each new page included (about 16 faults a round against 0.7 on the
// empty queue), a cost of the harness that no node has.
func copySynced(path, from string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, src); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// TestBulkFillMatchesPublish checks that bulkFill writes what publishing
// the same messages writes.
func TestBulkFillMatchesPublish(t *testing.T) {
	ctx := context.Background()
	dump := func(s *Store, q string) string {
		var out strings.Builder
		err := s.read(ctx, func(d *dbq) error {
			for _, query := range []string{
				`SELECT story_key, head_seq, tail_seq, head_id, tail_id, visible_at, receive_count, nonce, delayed FROM stories WHERE queue_id = ?1 ORDER BY id`,
				`SELECT m.id, m.prev, s.story_key, m.seq, m.message_id, m.message_type, m.topic, m.correlation_id, m.enqueued_at, m.envelope
					FROM messages m JOIN stories s ON s.id = m.story_id WHERE m.queue_id = ?1 ORDER BY m.id`,
				`SELECT messages, dead_letters FROM queue_counts WHERE queue_id = ?1`,
				`SELECT message_id, accepted_at, deliveries FROM dedup ORDER BY message_id`,
			} {
				rows, err := d.query(query, q)
				if err != nil {
					return err
				}
				// Every column read as text: the column count from the
				// select list (none of these selects has a comma inside).
				list := query[len("SELECT "):strings.Index(query, "FROM")]
				vals := make([]string, strings.Count(list, ",")+1)
				ptrs := make([]any, len(vals))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				for rows.Next() {
					if err := rows.Scan(ptrs...); err != nil {
						return err
					}
					for _, v := range vals {
						fmt.Fprintf(&out, "%s|", v)
					}
					out.WriteString("\n")
				}
				rows.Close()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	const n, stories = 250, 7
	pub := openTemp(t)
	ws, prod, q := setupQueue(t, pub, 5)
	ms := make([]bus.PublishMessage, n)
	for i := range ms {
		id := fmt.Sprint("b", i)
		ms[i] = bus.PublishMessage{MessageID: id, MessageType: "story.context", Topic: "som.story.context",
			CorrelationID: fmt.Sprint("b", i%stories), Envelope: []byte(`{"message_id":"` + id + `","payload":"` + payload1K + `"}`)}
	}
	for i := range ms {
		if _, err := pub.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: prod, Messages: ms[i : i+1],
			Now: t0.Add(time.Duration(i-n) * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
	}
	bulk := openTemp(t)
	_, prod2, q2 := setupQueue(t, bulk, 5)
	bulkFill(t, bulk, q2, prod2, n, stories)
	want, got := dump(pub, q), dump(bulk, q2)
	want = strings.ReplaceAll(want, prod, "P")
	got = strings.ReplaceAll(got, prod2, "P")
	if want != got {
		t.Fatalf("bulk fill differs from publish:\n--- publish\n%.2000s\n--- bulk\n%.2000s", want, got)
	}
	// And it delivers: the first receive takes the story heads in order.
	r, err := bulk.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q2, Max: 100, Visibility: time.Hour, Now: t0.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Deliveries) != stories || r.Deliveries[0].MessageID != "b0" {
		t.Fatalf("receive after bulk fill: %d deliveries, first %q", len(r.Deliveries), r.Deliveries[0].MessageID)
	}
}

// procIO is the bytes the process read and wrote through system calls so
// far (/proc/self/io rchar and wchar): SQLite's page reads that miss its
// cache, and its WAL frames and checkpoints.
func procIO() (read, written int64) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "rchar":
			read = n
		case "wchar":
			written = n
		}
	}
	return read, written
}

// depthRig runs DepthOps' rounds on a queue holding one shape's backlog
// and sums what the timed ones took.
type depthRig struct {
	b        *testing.B
	s        *Store
	ws, prod string
	q        string
	stories  int
	k        int // messages published here, over the shape's stories
	one      []bus.PublishMessage
	nine     []bus.PublishMessage

	recv, ack, pub, recvCPU, ackCPU, pubCPU time.Duration
	rounds, taken                           int
}

func newDepthRig(b *testing.B, sh depthShape) *depthRig {
	stories := max(sh.stories, 100)
	s, ws, prod, q := depthStore(b, sh.depth, stories)
	return &depthRig{b: b, s: s, ws: ws, prod: prod, q: q, stories: stories,
		one: make([]bus.PublishMessage, 1), nine: make([]bus.PublishMessage, 9)}
}

func (r *depthRig) publish(ms []bus.PublishMessage) {
	if _, err := r.s.MessagePublish(context.Background(), &bus.PublishParams{WorkspaceID: r.ws, ProducerID: r.prod,
		Messages: ms, Now: t0, DedupWindow: 5 * time.Minute}); err != nil {
		r.b.Fatal(err)
	}
}

func (r *depthRig) next() bus.PublishMessage {
	r.k++
	return msg1K(fmt.Sprint("p", r.k), fmt.Sprint("b", r.k%r.stories))
}

// round publishes 9 (untimed), then times a publish of one, a receive of
// up to 10 and the ack of what it took; timed false only warms.
func (r *depthRig) round(timed bool) {
	ctx := context.Background()
	now := t0.Add(time.Second)
	for j := range r.nine {
		r.nine[j] = r.next()
	}
	r.publish(r.nine)
	r.one[0] = r.next()
	t, c := time.Now(), cpuTime()
	r.publish(r.one)
	pubT, pubC := time.Since(t), cpuTime()-c
	t, c = time.Now(), cpuTime()
	res, err := r.s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: r.q, Max: 10, Visibility: time.Hour, Now: now})
	if err != nil {
		r.b.Fatal(err)
	}
	recvT, recvC := time.Since(t), cpuTime()-c
	hs := make([]bus.Handle, len(res.Deliveries))
	for i, d := range res.Deliveries {
		hs[i] = d.Handle
	}
	t, c = time.Now(), cpuTime()
	if _, err := r.s.MessageAck(ctx, &bus.SettleParams{QueueID: r.q, Handles: hs, Now: now}); err != nil {
		r.b.Fatal(err)
	}
	if timed {
		r.ack += time.Since(t)
		r.ackCPU += cpuTime() - c
		r.pub, r.pubCPU, r.recv, r.recvCPU = r.pub+pubT, r.pubCPU+pubC, r.recv+recvT, r.recvCPU+recvC
		r.taken += len(hs)
		r.rounds++
	}
}

// us is a sum over the timed rounds as µs a round.
func (r *depthRig) us(d time.Duration) float64 { return float64(d) / 1e3 / float64(r.rounds) }

// BenchmarkDepthOps runs, one caller at a time, a single publish, a
// receive of up to 10 and the ack of what it took, on a queue holding the
// shape's backlog, and reports each operation's mean latency (wall time,
// the fsync before each answer included) and CPU time (the process's,
// while the call ran). Each op also publishes, untimed, a batch of 9, so
// the backlog stays as deep and the empty queue has 10 to take each time.
// The heads are taken in claim order, so at depth the receives reach rows
// deep in the file.
func BenchmarkDepthOps(b *testing.B) {
	for _, sh := range depthShapes() {
		b.Run(sh.name, func(b *testing.B) {
			r := newDepthRig(b, sh)
			// Warm: the queue's heads load, the statements are prepared.
			for range 20 {
				r.round(false)
			}
			b.ReportAllocs()
			b.ResetTimer()
			defer profileTimed(b)()
			r0, w0 := procIO()
			for i := 0; i < b.N; i++ {
				r.round(true)
			}
			b.StopTimer()
			r1, w1 := procIO()
			b.ReportMetric(float64(r1-r0)/1024/float64(b.N), "read-KiB/op")
			b.ReportMetric(float64(w1-w0)/1024/float64(b.N), "write-KiB/op")
			b.ReportMetric(r.us(r.recv), "recv-µs")
			b.ReportMetric(r.us(r.ack), "ack-µs")
			b.ReportMetric(r.us(r.pub), "pub-µs")
			b.ReportMetric(r.us(r.recvCPU), "recv-cpu-µs")
			b.ReportMetric(r.us(r.ackCPU), "ack-cpu-µs")
			b.ReportMetric(r.us(r.pubCPU), "pub-cpu-µs")
			b.ReportMetric(float64(r.taken)/float64(b.N), "msgs/recv")
		})
	}
}

// depthBlock is how many rounds BenchmarkDepthPaired runs on one queue
// before it turns to the other.
const depthBlock = 100

// BenchmarkDepthPaired is DepthOps on an empty queue and on a backlog,
// side by side in one run: blocks of depthBlock rounds on each in turn
// (which goes first alternates from block to block), b.N timed rounds on
// each, after 200 warming rounds on each. Two DepthOps sub-benchmarks run
// one after the other, and what the machine does meanwhile moves one and
// not the other: the empty queue's own receive took from 212 to 268 µs
// between runs of one binary, as much as the depth goal's margin. Here
// both see the same moments. It reports the backlog's mean latencies
// (wall time, fsync included), the empty queue's (empty-…), and their
// ratios (…-ratio: backlog over empty).
func BenchmarkDepthPaired(b *testing.B) {
	for _, sh := range depthShapes() {
		if sh.depth == 0 {
			continue
		}
		b.Run(sh.name, func(b *testing.B) {
			empty, deep := newDepthRig(b, depthShape{name: "empty"}), newDepthRig(b, sh)
			// Warm longer than DepthOps: the backlog's pages come into
			// SQLite's cache over the first hundreds of rounds, and it is
			// the steady state that is compared.
			for range 2 * depthBlock {
				empty.round(false)
				deep.round(false)
			}
			b.ResetTimer()
			for done, i := 0, 0; done < b.N; i++ {
				n := min(depthBlock, b.N-done)
				first, second := empty, deep
				if i%2 == 1 {
					first, second = deep, empty
				}
				for range n {
					first.round(true)
				}
				for range n {
					second.round(true)
				}
				done += n
			}
			b.StopTimer()
			for _, m := range []struct {
				name      string
				deep, mty time.Duration
			}{{"recv", deep.recv, empty.recv}, {"ack", deep.ack, empty.ack}, {"pub", deep.pub, empty.pub}} {
				b.ReportMetric(deep.us(m.deep), m.name+"-µs")
				b.ReportMetric(empty.us(m.mty), "empty-"+m.name+"-µs")
				b.ReportMetric(float64(m.deep)/float64(m.mty), m.name+"-ratio")
			}
		})
	}
}

// BenchmarkDepthDrain drains a backlog of each shape (not the empty one)
// with four callers receiving up to 10 and acking them: msg/s and CPU per
// message, for shallow against deep stories; also the messages a commit
// carries (msgs/commit, the group commit's batch), the bytes the
// process wrote per message (write-KiB/msg: WAL frames and checkpoints),
// and the 99th percentile and the longest of the ack calls' latencies
// (ack-p99-ms, ack-max-ms: a checkpoint inside a commit, or a flush of the
// acknowledged rows, shows there and not in the means).
func BenchmarkDepthDrain(b *testing.B) {
	for _, sh := range depthShapes() {
		if sh.depth == 0 {
			continue
		}
		b.Run(sh.name, func(b *testing.B) {
			// The backlog, with slack for the last receives, which may find
			// fewer ready heads.
			if b.N*10+2000 > sh.depth {
				b.Skipf("%d receives of 10 need a deeper backlog than %d", b.N, sh.depth)
			}
			s, _, _, q := depthStore(b, sh.depth, sh.stories)
			ctx := context.Background()
			now := t0.Add(time.Second)
			if _, err := s.QueueStats(ctx, q, now); err != nil { // loads the heads
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			defer profileTimed(b)()
			cpu0 := cpuTime()
			_, w0 := procIO()
			c0 := s.w.commits.Load()
			acks := make([]time.Duration, 0, b.N)
			taken := drainParallel(b, s, q, now, &acks)
			_, w1 := procIO()
			reportCPU(b, cpu0, taken)
			b.ReportMetric(float64(taken)/float64(s.w.commits.Load()-c0), "msgs/commit")
			b.ReportMetric(float64(w1-w0)/1024/float64(taken), "write-KiB/msg")
			b.ReportMetric(float64(taken)/b.Elapsed().Seconds(), "msg/s")
			if len(acks) > 0 {
				slices.Sort(acks)
				msec := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
				b.ReportMetric(msec(acks[min(len(acks)-1, len(acks)*99/100)]), "ack-p99-ms")
				b.ReportMetric(msec(acks[len(acks)-1]), "ack-max-ms")
			}
		})
	}
}
