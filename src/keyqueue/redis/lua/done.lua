-- done(key, lease): finish the holder's lease; queue the key once more if it was re-added meanwhile.
-- Invariant kept: only the current lease's holder changes the key's state. A lease that ran out and was reclaimed
-- (or handed to another holder) no longer matches, and nothing is touched (-1: the caller raises LeaseLost). A
-- lease past its deadline that nobody has reclaimed yet still matches and is honoured.
-- ARGV: 1 key, 2 "token|holder" (no queue time: done does not read the clock).
-- Returns -1 lost, 0 finished, 1 finished and queued again.
local key = ARGV[1]
if redis.call('HGET', LEASE, key) ~= ARGV[2] then
  return -1
end
redis.call('HDEL', LEASE, key)
redis.call('ZREM', PROC, key)
if redis.call('HEXISTS', DIRTY, key) == 1 then
  redis.call('RPUSH', FIFO, key)
  notify()
  redis.call('HINCRBY', COUNTERS, 'redelivered', 1)
  return 1
end
return 0
