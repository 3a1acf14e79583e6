-- 0008: one secondary index fewer on messages. The index on enqueued_at
-- alone served only the retention sweep across queues; every publish and
-- every ack paid for it (an insert and a delete in a B-tree ordered like
-- the table, which at depth is a page written long before, and written
-- again by the next checkpoint). The sweep now goes queue by queue
-- through messages_queue (queue_id, enqueued_at), which stays for the
-- queue counts' oldest ready message and for purge.
DROP INDEX messages_enqueued;
