package sqlite

import (
	"database/sql"
	"errors"
)

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
type ackedRows struct {
	n      int
	logged int // records appended to ack_log since the last merge (a hint, as n)
}

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

// ackLogMergeRows is how many ack records the writer lets gather in
// ack_log before it moves them into ack_records together. A re-ack of a
// handle no longer live reads ack_log without an index (a few dozen
// pages at most), and the move writes each page of ack_records the
// records fall into once. A var, so that tests can change it.
var ackLogMergeRows = 1024

// ackLogSQL appends n ack records: (queue id, story id, seq, nonce, acked
// at) each.
var ackLogSQL = newSizedSQL(func(n int) string {
	return `INSERT INTO ack_log(queue_id, story_id, seq, nonce, acked_at) VALUES ` + placeholders(n, 5)
})

// recordAcks appends n ack records (args: five values each, as ackLogSQL
// takes them) and moves the gathered records into ack_records once
// enough gathered, in the caller's transaction.
func recordAcks(d *dbq, n int, args []any) error {
	if _, err := d.exec(ackLogSQL.text(n), args...); err != nil {
		return interpretError(err)
	}
	if d.acked == nil {
		return nil
	}
	if d.acked.logged += n; d.acked.logged < ackLogMergeRows {
		return nil
	}
	return mergeAckLog(d)
}

// mergeAckLog moves every record of ack_log into ack_records, in key
// order; of two records of one message the later one wins (the upsert
// runs in ack_log's order within a key).
func mergeAckLog(d *dbq) error {
	if _, err := d.exec(`INSERT INTO ack_records(queue_id, story_id, seq, nonce, acked_at)
		SELECT queue_id, story_id, seq, nonce, acked_at FROM ack_log WHERE true ORDER BY queue_id, seq, story_id, id
		ON CONFLICT(queue_id, seq, story_id) DO UPDATE SET nonce = excluded.nonce, acked_at = excluded.acked_at`); err != nil {
		return interpretError(err)
	}
	if _, err := d.exec(`DELETE FROM ack_log`); err != nil {
		return interpretError(err)
	}
	if d.acked != nil {
		d.acked.logged = 0
	}
	return nil
}

// ackedNonce returns the nonce of the handle the message (queue, story,
// seq) was last acknowledged with, or sql.ErrNoRows if no ack of it is
// on record.
func ackedNonce(d *dbq, queueID string, storyID, seq int64) (int64, error) {
	var nonce int64
	err := d.row(`SELECT nonce FROM ack_log WHERE queue_id = ? AND story_id = ? AND seq = ? ORDER BY id DESC LIMIT 1`,
		queueID, storyID, seq).Scan(&nonce)
	if !errors.Is(err, sql.ErrNoRows) {
		return nonce, err
	}
	err = d.row(`SELECT nonce FROM ack_records WHERE queue_id = ? AND story_id = ? AND seq = ?`, queueID, storyID, seq).Scan(&nonce)
	return nonce, err
}
