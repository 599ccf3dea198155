-- inspect(): sizes and counters of the queue, for metrics (workqueue_depth = dirty keys: the fifo and the "!" keys)
-- and repr.
-- Invariant kept: read only.
-- Returns {dirty, fifo, processing, delayed, expired, redelivered}.
local c = redis.call('HMGET', COUNTERS, 'expired', 'redelivered', 'marks', 'unmarked')
local expired, redelivered = tonumber(c[1]) or 0, tonumber(c[2]) or 0
local fifo = redis.call('LLEN', FIFO)
return {
  fifo + (tonumber(c[3]) or 0) - redelivered - (tonumber(c[4]) or 0), fifo, redis.call('ZCARD', PROC),
  redis.call('ZCARD', DELAY), expired, redelivered,
}
