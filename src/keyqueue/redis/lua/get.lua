-- get(lease, holder): hand out the fifo head under a new lease, after reclaiming run-out leases and firing due
-- delayed keys.
-- Invariant kept: a key is handed out only from the fifo, so never while it is in proc: one holder per key while
-- leases are honoured. The new lease's token is larger than every earlier one (seq), and the key's entry names
-- only the new lease, so a previous holder's done() cannot touch it. Tokens follow the server's clock (see below), so
-- they do not repeat across a failover to a replica that missed the last ones.
-- ARGV: 1 now, 2 lease length in microseconds, 3 holder id, 4 "1" if the caller records metrics (only then is the
-- time the key became dirty read, for waited).
-- The due hint (lib.lua) spares reading proc and delay when nothing can have run out or fallen due; the new lease's
-- deadline lowers it.
-- Returns one string (a flat reply: a client parses one bulk string much faster than an array of seven):
--   "1 <fired> <dirtied> <waited> <token|holder> <key>"   a key was handed out (the key last: it may hold spaces)
--   "0 <fired> <dirtied> <wake> <now>"                    nothing ready
-- where fired is the number of due delayed keys moved, dirtied how many keys became dirty in this script
-- (reclaimed or fired), waited how long the key was dirty before this get (microseconds; workqueue_queue_duration;
-- "-" if unknown), wake the next wake-up time in microseconds ("-": none). When leases ran out and were reclaimed,
-- the reply is {that string, the reclaimed keys} instead.
local now = now_us()
local expired, reclaimed, fired, promoted, due, write = false, 0, 0, 0, read_due(), false
if due <= now then -- something may have run out or fallen due
  --: cold
  expired, reclaimed, fired, promoted, due = catch_up(now)
  write = true
  --: end cold
end
local head = '0 0 ' -- the common case, without formatting two numbers
if fired > 0 or reclaimed + promoted > 0 then
  head = fired .. ' ' .. (reclaimed + promoted) .. ' '
end
local reply
local key = redis.call('LPOP', FIFO)
if not key then
  local wake = '-'
  if due ~= INF then wake = int(due) end -- a lower bound of the next change (the hint): at worst an early wake-up
  reply = '0 ' .. head .. wake .. ' ' .. int(now)
else
  local since = false -- the key's entry is waiting ("<since>"), as every fifo key's
  if ARGV[4] == '1' then since = redis.call('HGET', STATE, key) end
  -- The token: larger than the last one this server knows, and at least the queue time in microseconds. A token
  -- is then never above its issuer's clock (one get takes far more than a microsecond of server time), so a replica
  -- promoted after missing the last tokens issues larger ones as long as its clock is not behind the old primary's
  -- by more than the failover took (NTP-synchronised hosts).
  local seq = redis.call('INCR', SEQ)
  if seq <= now then
    seq = now + 1
    redis.call('SET', SEQ, int(seq))
  end
  if seq >= 1e14 then seq = int(seq) end -- below 10^14 concatenation is exact (and cheaper than formatting)
  local lease = seq .. '|' .. ARGV[3]
  redis.call('HSET', STATE, key, '@' .. lease) -- handed out, clean: the dirty mark goes with the waiting entry
  local deadline = now + tonumber(ARGV[2])
  redis.call('ZADD', PROC, deadline, key)
  if deadline < due then
    due, write = deadline, true
  end
  local waited = '-'
  since = since and tonumber(since) -- an entry without a time ("") is unknown too
  if since then waited = int(math.max(0, now - since)) end
  reply = '1 ' .. head .. waited .. ' ' .. lease .. ' ' .. key
end
if write then -- after catch_up, or a deadline below the hint
  --: cold
  write_due(due)
  --: end cold
end
if expired then
  return {reply, expired}
end
return reply
