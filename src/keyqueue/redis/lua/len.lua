-- len(): keys waiting in the fifo, after reclaiming run-out leases and firing due delayed keys (as get does), and
-- the dirty keys (client-go's depth; a metrics scrape reads it here): the fifo and the "!" keys (counters).
-- Invariant kept: the same as get's reclaim and promote steps; nothing is handed out.
-- ARGV: 1 now.  Returns {fifo length, dirty keys, keys that became dirty in this script}.
local now = now_us()
local reclaimed, promoted = 0, 0
if read_due() <= now then -- something may have run out or fallen due
  --: cold
  local _, due
  _, reclaimed, _, promoted, due = catch_up(now)
  write_due(due)
  --: end cold
end
local fifo = redis.call('LLEN', FIFO)
local c = redis.call('HMGET', COUNTERS, 'marks', 'redelivered', 'unmarked')
return {fifo, fifo + (tonumber(c[1]) or 0) - (tonumber(c[2]) or 0) - (tonumber(c[3]) or 0), reclaimed + promoted}
