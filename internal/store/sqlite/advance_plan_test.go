package sqlite

import (
	"context"
	"strings"
	"testing"
)

// TestAdvanceReadsIndexOnly: an ack's advance finds each story's next
// message, its seq and its enqueued_at in messages_next alone, without
// reading the message's row (a page far down the table with many shallow
// stories, which at depth comes back from the operating system).
func TestAdvanceReadsIndexOnly(t *testing.T) {
	s := openTemp(t)
	for _, c := range []struct {
		name, sql string
		args      []any
	}{
		{"the ack's advance", advanceSQL.text(2), []any{int64(1), int64(2)}},
		{"a story's next message", `SELECT id, seq, enqueued_at FROM messages WHERE prev = ?`, []any{int64(1)}},
	} {
		var plan []string
		err := s.read(context.Background(), func(d *dbq) error {
			rows, err := d.query("EXPLAIN QUERY PLAN "+c.sql, c.args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id, parent, notused int
				var detail string
				if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
					return err
				}
				plan = append(plan, detail)
			}
			return rows.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(plan, "; ")
		if !strings.Contains(all, "COVERING INDEX messages_next") {
			t.Errorf("%s: plan %q does not read messages through the covering index messages_next", c.name, all)
		}
	}
}
