package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// migrationFiles holds the schema, one numbered file per step
// (NNNN_name.sql). A released file is never edited; a change is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one schema step.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the embedded migrations in version order.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		if !ok || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration %q: name must be NNNN_name.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q: bad version number", name)
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", name))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := range ms {
		if ms[i].version != i+1 {
			return nil, fmt.Errorf("migration %q: versions must be 1, 2, 3, … without gaps", ms[i].name)
		}
	}
	return ms, nil
}

// latestVersion is the newest schema version this binary knows.
func latestVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// migrate brings the schema up to date in one IMMEDIATE transaction (so two
// processes opening the same new file do not both apply a step), and refuses
// a database whose schema is newer than this binary.
func migrate(ctx context.Context, c *sql.Conn, ms []migration) (from, to int, err error) {
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, 0, fmt.Errorf("migrate: begin: %w", interpretError(err))
	}
	defer func() {
		if err != nil {
			_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if _, err := c.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return 0, 0, fmt.Errorf("migrate: %w", interpretError(err))
	}
	if err := c.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&from); err != nil {
		return 0, 0, fmt.Errorf("migrate: read version: %w", interpretError(err))
	}
	known := 0
	if len(ms) > 0 {
		known = ms[len(ms)-1].version
	}
	if from > known {
		return from, from, fmt.Errorf("migrate: the database schema is version %d but this sombus knows only up to version %d: run a newer sombus", from, known)
	}
	for _, m := range ms {
		if m.version <= from {
			continue
		}
		if _, err := c.ExecContext(ctx, m.sql); err != nil {
			return from, 0, fmt.Errorf("migrate: apply %s: %w", m.name, interpretError(err))
		}
		if _, err := c.ExecContext(ctx, "INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)",
			m.version, m.name, time.Now().UnixMilli()); err != nil {
			return from, 0, fmt.Errorf("migrate: record %s: %w", m.name, interpretError(err))
		}
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return from, 0, fmt.Errorf("migrate: commit: %w", interpretError(err))
	}
	return from, known, nil
}
