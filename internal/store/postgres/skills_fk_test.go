package postgres

import (
	"testing"

	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// TestSkillsForeignKeyMigration: migration 0011 deletes the skills rows of
// connections that no longer exist (left by a put that overlapped the
// removal of its connection, before the key), keeps the others, and from
// then on a connection's removal takes its skills along.
func TestSkillsForeignKeyMigration(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := openURL(t, url)
	ctx := t.Context()
	_, _, q := setupQueue(t, s, 1)
	// Back to version 10 (without the counters' key of 0012 too), with an
	// orphan row next to the queue's own.
	if _, err := s.pool.Exec(ctx, `ALTER TABLE skills DROP CONSTRAINT skills_connection_id_fkey;
		ALTER TABLE queue_counts DROP CONSTRAINT queue_counts_queue_id_fkey;
		DELETE FROM schema_migrations WHERE version >= 11`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO skills (connection_id, registrations, updated_at)
		VALUES ($1, '[]', 1), ('c_gone', '[]', 1)`, q); err != nil {
		t.Fatal(err)
	}
	s2 := openURL(t, url)
	var kept []string
	rows, err := s2.pool.Query(ctx, `SELECT connection_id FROM skills ORDER BY connection_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || kept[0] != q {
		t.Fatalf("skills after migration 0011 = %q, want only %s's", kept, q)
	}
	if _, err := s2.pool.Exec(ctx, `DELETE FROM connections WHERE id = $1`, q); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s2.pool.QueryRow(ctx, `SELECT count(*) FROM skills`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d skills rows after the removal of their connection, want 0", n)
	}
}
