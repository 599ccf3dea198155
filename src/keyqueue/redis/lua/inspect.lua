-- inspect(): sizes and counters of the queue, for metrics (workqueue_depth = dirty keys) and repr.
-- Invariant kept: read only.
-- Returns {dirty, fifo, processing, delayed, expired, redelivered}.
local counters = redis.call('HMGET', COUNTERS, 'expired', 'redelivered')
return {
  redis.call('HLEN', DIRTY), redis.call('LLEN', FIFO), redis.call('ZCARD', PROC), redis.call('ZCARD', DELAY),
  tonumber(counters[1] or '0'), tonumber(counters[2] or '0'),
}
