-- 0004: the received stories of each queue, by visibility.
--
-- Every receive first looks for the queue's exhausted heads that are
-- visible again (receive_count >= the attempt limit, which is at least 1),
-- to move them to the dead letters. stories_ready (queue_id, visible_at,
-- id) holds every story, ready or not, so that look scanned all the ready
-- stories of the queue (or, planned generically, the whole table): 6 ms a
-- receive at 50,000 stories. Stories received at least once are few (those
-- in flight, released or timed out), and this index holds only them.
CREATE INDEX stories_received_queue ON stories (queue_id, visible_at) WHERE receive_count > 0;
