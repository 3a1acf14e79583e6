package sqlite

// ackedFlushRows is how many acknowledged message rows the writer lets
// gather in acked_messages before it deletes them together. At about three
// rows to a page, 64 rows span some twenty pages of messages: one
// transaction writes each of them (and the neighbours SQLite rebalances an
// under-full page with) once, where deleting at every ack wrote a page
// again for each of its rows. (In WAL mode a page the delete empties is
// written all the same.) A var, so that tests can change it.
var ackedFlushRows = 64

// ackedRows counts the rows the writer named in acked_messages since its
// last flush. It is a hint that only times the flush: a rolled-back
// operation may leave it too high (an early flush), and rows left from
// before a restart wait for the next flush, which takes every row named.
type ackedRows struct{ n int }

// markAcked names the message rows of acknowledged heads of queueID in
// acked_messages instead of deleting them, takes them out of the queue's
// count of messages, and deletes every named row once enough gathered.
// The caller advances their stories in the same transaction.
func markAcked(d *dbq, queueID string, rows []int64) error {
	args := d.argList(len(rows))
	for _, r := range rows {
		args.int(r)
	}
	if _, err := d.exec(ackedSQL.text(len(rows)), args.args...); err != nil {
		return interpretError(err)
	}
	if _, err := d.exec(`UPDATE queue_counts SET messages = messages - ? WHERE queue_id = ?`, len(rows), queueID); err != nil {
		return interpretError(err)
	}
	if d.acked == nil {
		return nil
	}
	if d.acked.n += len(rows); d.acked.n < ackedFlushRows {
		return nil
	}
	return flushAcked(d)
}

// ackedSQL names n acknowledged message rows.
var ackedSQL = newSizedSQL(func(n int) string { return `INSERT INTO acked_messages(id) VALUES ` + placeholders(n, 1) })

// flushAcked deletes the message rows named in acked_messages (in row id
// order, so that runs of adjacent rows free their pages); the trigger on
// messages deletes their names and leaves the counts alone. Operations
// that read or delete messages by queue or by age (purge, expiry) flush
// first, so that they see only the queue's messages.
func flushAcked(d *dbq) error {
	if _, err := d.exec(`DELETE FROM messages WHERE id IN (SELECT id FROM acked_messages)`); err != nil {
		return interpretError(err)
	}
	if d.acked != nil {
		d.acked.n = 0
	}
	return nil
}
