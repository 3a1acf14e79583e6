package sqlite

import (
	"github.com/sombus/sombus/internal/bus"
)

// seqScanner reads a leading rowid into seq, then the columns scanConn
// reads.
type seqScanner struct {
	sc  interface{ Scan(...any) error }
	seq *int64
}

func (s seqScanner) Scan(dest ...any) error { return s.sc.Scan(append([]any{s.seq}, dest...)...) }

// ConnectionPage lists one page of a workspace's connections by creation
// time, then rowid (insertion order), as ConnectionList does, reading one
// row past the page to learn whether more follow.
func (t *tx) ConnectionPage(p bus.ConnectionPageParams) (bus.ConnectionPageResult, error) {
	q := `SELECT rowid, ` + connCols + ` FROM connections WHERE workspace_id = ?`
	args := []any{p.WorkspaceID}
	if p.Kind != "" {
		q += ` AND kind = ?`
		args = append(args, string(p.Kind))
	}
	if p.After != nil {
		at := ms(p.After.CreatedAt)
		q += ` AND (created_at > ? OR created_at = ? AND rowid > ?)`
		args = append(args, at, at, p.After.Seq)
	}
	rows, err := t.d.query(q+` ORDER BY created_at, rowid LIMIT ?`, append(args, p.Limit+1)...)
	if err != nil {
		return bus.ConnectionPageResult{}, interpretError(err)
	}
	defer rows.Close()
	var out bus.ConnectionPageResult
	var seqs []int64
	for rows.Next() {
		var seq int64
		c, err := scanConn(seqScanner{&rows, &seq})
		if err != nil {
			return bus.ConnectionPageResult{}, interpretError(err)
		}
		out.Connections = append(out.Connections, c)
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return bus.ConnectionPageResult{}, interpretError(err)
	}
	if len(out.Connections) > p.Limit {
		last := out.Connections[p.Limit-1]
		out.Connections = out.Connections[:p.Limit]
		out.Next = &bus.ConnectionPosition{CreatedAt: last.CreatedAt, Seq: seqs[p.Limit-1]}
	}
	return out, nil
}
