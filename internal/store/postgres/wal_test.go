package postgres

// TestWALPerMessage prints the WAL the message path writes, per message and
// per relation: n single publishes, then n receives of one message, then n
// acks of one handle, each phase measured from the server's WAL between
// its start and end (pg_walinspect). Records of no relation (commits) are
// counted when their transaction wrote a relation of the test's schema, so
// the asynchronous NOTIFY transactions and other sessions' are left out. It runs only
// with SOMBUS_WAL=1; SOMBUS_WAL_STORIES spreads the messages over fewer
// stories (default: one each), SOMBUS_WAL_RECEIVE_MAX takes more a receive
// (default 1; each receive's handles are acked in one call):
//
//	SOMBUS_WAL=1 go test -count=1 -run TestWALPerMessage -v ./internal/store/postgres/

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
)

func TestWALPerMessage(t *testing.T) {
	if os.Getenv("SOMBUS_WAL") == "" {
		t.Skip("SOMBUS_WAL not set")
	}
	const n = 200
	stories, max := n, 1 // unique stories, one message a receive
	if v := os.Getenv("SOMBUS_WAL_STORIES"); v != "" {
		fmt.Sscan(v, &stories)
	}
	if v := os.Getenv("SOMBUS_WAL_RECEIVE_MAX"); v != "" {
		fmt.Sscan(v, &max)
	}
	s := OpenTest(t)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA public`); err != nil {
		t.Skip("pg_walinspect:", err)
	}
	ws, q := benchQueue(t, s)
	producer := bus.NewID(bus.PrefixConnection)
	payload := strings.Repeat("x", 1024)
	names := map[string]string{}
	relNames := func() {
		rows, err := s.pool.Query(ctx, `SELECT c.relfilenode::text, c.relname FROM pg_class c
			WHERE c.relnamespace = current_schema()::regnamespace AND c.relfilenode <> 0`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var f, name string
			if err := rows.Scan(&f, &name); err != nil {
				t.Fatal(err)
			}
			names[f] = name
		}
	}
	lsn := func() string {
		var l string
		if err := s.pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	re := regexp.MustCompile(`blkref #0: rel \d+/(\d+)/(\d+)`)
	var dbOID string
	if err := s.pool.QueryRow(ctx, `SELECT oid::text FROM pg_database WHERE datname = current_database()`).Scan(&dbOID); err != nil {
		t.Fatal(err)
	}
	report := func(phase string, spans [][2]string) {
		relNames()
		type agg struct{ recs, bytes, fpi int }
		by := map[string]*agg{}
		var total agg
		for _, sp := range spans {
			rows, err := s.pool.Query(ctx, `SELECT resource_manager, record_type, record_length, fpi_length,
					coalesce(block_ref, ''), coalesce(xid::text, '')
				FROM public.pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)`, sp[0], sp[1])
			if err != nil {
				t.Fatal(err)
			}
			type rec struct {
				rm, typ, ref, xid string
				length, fpi       int
			}
			var recs []rec
			ours := map[string]bool{} // transactions that wrote this schema's relations
			for rows.Next() {
				var r rec
				if err := rows.Scan(&r.rm, &r.typ, &r.length, &r.fpi, &r.ref, &r.xid); err != nil {
					t.Fatal(err)
				}
				if m := re.FindStringSubmatch(r.ref); m != nil && m[1] == dbOID && names[m[2]] != "" {
					ours[r.xid] = true
				}
				recs = append(recs, r)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				rel := "-"
				if m := re.FindStringSubmatch(r.ref); m != nil {
					name, ok := names[m[2]]
					if !ok || m[1] != dbOID {
						continue // another schema's or database's relation
					}
					rel = name
				} else if !ours[r.xid] {
					continue // another transaction's record (a commit)
				}
				k := fmt.Sprintf("%-28s %-10s %s", rel, r.rm, r.typ)
				a := by[k]
				if a == nil {
					a = &agg{}
					by[k] = a
				}
				a.recs++
				a.bytes += r.length
				a.fpi += r.fpi
				total.recs++
				total.bytes += r.length
				total.fpi += r.fpi
			}
		}
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Logf("%s: %.1f records, %.0f bytes (%.0f of page images) per message", phase,
			float64(total.recs)/n, float64(total.bytes)/n, float64(total.fpi)/n)
		for _, k := range keys {
			a := by[k]
			t.Logf("  %s  %5.2f rec  %6.0f B  (%d fpi B total)", k, float64(a.recs)/n, float64(a.bytes)/n, a.fpi)
		}
	}
	// Warm up: a few messages through so the first page writes are done.
	publish := func(i int) {
		mid := fmt.Sprintf("m-%d", i)
		if _, err := s.MessagePublish(ctx, &bus.PublishParams{WorkspaceID: ws, ProducerID: producer, Now: time.Now(),
			DedupWindow: bus.DedupWindow, Messages: []bus.PublishMessage{{MessageID: mid, MessageType: "story.context",
				Topic: "som.story.context", CorrelationID: fmt.Sprintf("story-%d", (i+1000)%stories),
				Envelope: []byte(`{"message_id":"` + mid + `","payload":{"data":"` + payload + `"}}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// drain receives up to n messages a call until none is left, and acks
	// each call's; it returns the WAL spans of the receives and of the acks.
	drain := func(max int) (recv, ack [][2]string) {
		for {
			a := lsn()
			r, err := s.MessageReceive(ctx, &bus.ReceiveParams{QueueID: q, Max: max, Visibility: time.Minute, Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Deliveries) == 0 {
				return
			}
			b := lsn()
			if _, err := s.MessageAck(ctx, &bus.SettleParams{QueueID: q, Handles: handlesOf(r), Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
			recv, ack = append(recv, [2]string{a, b}), append(ack, [2]string{b, lsn()})
		}
	}
	for i := range 20 {
		publish(-1 - i)
	}
	drain(1)

	a := lsn()
	for i := range n {
		publish(i)
	}
	b := lsn()
	recv, ack := drain(max)
	report("publish", [][2]string{{a, b}})
	report("receive", recv)
	report("ack", ack)
}
