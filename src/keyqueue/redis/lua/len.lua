-- len(): keys waiting in the fifo, after reclaiming run-out leases and firing due delayed keys (as get does).
-- Invariant kept: the same as get's reclaim and promote steps; nothing is handed out.
-- ARGV: 1 now.  Returns the fifo length.
local now = now_us()
expire(now)
promote(now)
return redis.call('LLEN', FIFO)
