-- done(key, lease): finish the holder's lease; queue the key once more if it was re-added meanwhile.
-- Invariant kept: only the current lease's holder changes the key's state. A lease that ran out and was reclaimed
-- (or handed to another holder) no longer matches the key's "@"/"!" entry, and nothing is touched (-1: the caller
-- raises LeaseLost). A lease past its deadline that nobody has reclaimed yet still matches and is honoured.
-- ARGV: 1 key, 2 "token|holder" (no queue time: done does not read the clock).
-- Returns -1 lost, 0 finished, 1 finished and queued again.
local key, lease = ARGV[1], ARGV[2]
local v = redis.call('HGET', STATE, key)
if v == '@' .. lease then
  redis.call('HDEL', STATE, key)
  redis.call('ZREM', PROC, key)
  return 0
end
local n = #lease
if not v or string.sub(v, 1, n + 2) ~= '!' .. lease .. ' ' then
  return -1
end
--: cold (what only a redelivery needs is defined from here on)
redis.call('HSET', STATE, key, string.sub(v, n + 3)) -- waiting, dirty since it was re-added
redis.call('ZREM', PROC, key)
redis.call('RPUSH', FIFO, key)
notify()
redis.call('HINCRBY', COUNTERS, 'redelivered', 1)
return 1
