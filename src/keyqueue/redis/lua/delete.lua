-- delete(): remove every key of the queue (its whole shared state: queued, processing, delayed, limiter state).
-- Invariant kept: all or nothing, in one script; handles still open see an empty queue afterwards.
-- Returns how many Redis keys existed.
return redis.call('DEL', FIFO, DIRTY, PROC, LEASE, DELAY, NOTIFY, FAIL, BUCKET, SEQ, COUNTERS, DUE)
