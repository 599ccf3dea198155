-- delete(): remove every key of the queue (its whole shared state: queued, processing, delayed, limiter state),
-- and the keys an older keyqueue's layout kept beside them (dirty, lease: see layout.lua).
-- Invariant kept: all or nothing, in one script; handles still open see an empty queue afterwards.
-- Returns how many Redis keys existed.
return redis.call('DEL', FIFO, STATE, PROC, DELAY, NOTIFY, FAIL, BUCKET, SEQ, COUNTERS, DUE, OLD_DIRTY, OLD_LEASE)
