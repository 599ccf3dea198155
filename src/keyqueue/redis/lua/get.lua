-- get(lease, holder): hand out the fifo head under a new lease, after reclaiming run-out leases and firing due
-- delayed keys.
-- Invariant kept: a key is handed out only from the fifo, so never while it is in proc: one holder per key while
-- leases are honoured. The new lease's token is larger than every earlier one (seq), and the previous holder's
-- lease entry is gone, so its done() cannot touch this lease.
-- ARGV: 1 now, 2 lease length in microseconds, 3 holder id.
-- Returns {1, key, "token|holder", waited, fired, expired keys, dirtied}
--      or {0, next wake-up time in microseconds or "", now, "", fired, expired keys, dirtied}
-- where waited is how long the key was dirty before this get (microseconds; workqueue_queue_duration), fired the
-- number of due delayed keys moved, dirtied how many keys became dirty in this script (reclaimed or fired).
local now = now_us()
local expired, reclaimed = expire(now)
local fired, promoted = promote(now)
local key = redis.call('LPOP', FIFO)
if not key then
  return {0, next_wake(), int(now), '', fired, expired, reclaimed + promoted}
end
local since = redis.call('ZSCORE', DIRTY, key)
redis.call('ZREM', DIRTY, key)
local lease = int(redis.call('INCR', SEQ)) .. '|' .. ARGV[3]
redis.call('ZADD', PROC, int(now + tonumber(ARGV[2])), key)
redis.call('HSET', LEASE, key, lease)
local waited = ''
if since then waited = int(math.max(0, now - tonumber(since))) end
return {1, key, lease, waited, fired, expired, reclaimed + promoted}
