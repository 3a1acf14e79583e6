package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAckMergeWritesFewPages: moving the ack records of a thousand stories
// that advance side by side (as a drain over many stories acknowledges
// them) into an ack_records table that already holds 40 of each story's
// records writes a few pages of ack_records, not one per story: the
// records of one seq are neighbours in the table's order. (In story order
// the move wrote every leaf of the table, about 300 pages here.)
func TestAckMergeWritesFewPages(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	s, err := open(ctx, path, nil, walPolicy{every: time.Hour, limitBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, _, q := setupQueue(t, s, 5)
	const stories, held = 1000, 40
	err = s.w.do(ctx, func(d *dbq) error {
		// The records acknowledged so far, in the order a drain adds them.
		for seq := 1; seq <= held; seq++ {
			var b strings.Builder
			for st := 1; st <= stories; st++ {
				if st > 1 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, "('%s', %d, %d, %d, %d)", q, st, seq, st*seq+1, seq)
			}
			if _, err := d.exec(`INSERT INTO ack_records(queue_id, story_id, seq, nonce, acked_at) VALUES ` + b.String()); err != nil {
				return err
			}
		}
		// The next seq of every story, waiting in ack_log.
		var b strings.Builder
		for st := 1; st <= stories; st++ {
			if st > 1 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "('%s', %d, %d, %d, %d)", q, st, held+1, st+7, held+1)
		}
		_, err := d.exec(`INSERT INTO ack_log(queue_id, story_id, seq, nonce, acked_at) VALUES ` + b.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.w.do(ctx, func(d *dbq) error { _, err := d.exec("PRAGMA wal_autocheckpoint=0"); return err }); err != nil {
		t.Fatal(err)
	}
	owner := pageOwners(t, s)
	leaves := 0
	for _, n := range owner {
		if n == "ack_records" {
			leaves++
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	from := fi.Size()
	if err := s.w.do(ctx, mergeAckLog); err != nil {
		t.Fatal(err)
	}
	written := map[uint32]bool{}
	walPages(t, path, from, -1, func(pg uint32) {
		if owner[pg] == "ack_records" {
			written[pg] = true
		}
	})
	t.Logf("the move of %d records wrote %d of the %d pages of ack_records", stories, len(written), leaves)
	if leaves < 100 {
		t.Fatalf("ack_records has only %d pages: the test's table is too small to tell", leaves)
	}
	if len(written) > 30 {
		t.Fatalf("the move of %d records wrote %d of the %d pages of ack_records, want at most 30", stories, len(written), leaves)
	}
	if logged, merged := ackLogRows(t, s); logged != 0 || merged != stories*(held+1) {
		t.Fatalf("after the move: %d in ack_log, %d in ack_records; want 0, %d", logged, merged, stories*(held+1))
	}
}
