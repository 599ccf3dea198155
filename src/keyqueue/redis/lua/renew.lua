-- renew(lease, key1, lease1, key2, lease2, ...): the heartbeat: move each still-current lease's deadline to now +
-- lease. Invariant kept: a lease that is no longer current (its key's "@"/"!" entry names another lease, or the key
-- has none) is never extended, so a holder that was cut off cannot take a key back.
-- ARGV: 1 now, 2 lease length in microseconds, then key/lease pairs.  Returns the keys whose lease is lost.
local now = now_us()
local deadline = now + tonumber(ARGV[2])
local lost = {}
local renewed = false
for i = 3, #ARGV, 2 do
  local key, lease = ARGV[i], ARGV[i + 1]
  local v = redis.call('HGET', STATE, key)
  if v and (v == '@' .. lease or string.sub(v, 1, #lease + 2) == '!' .. lease .. ' ') then
    redis.call('ZADD', PROC, 'XX', deadline, key)
    renewed = true
  else
    lost[#lost + 1] = key
  end
end
if renewed then lower_due(deadline) end -- a shorter lease than the last one may move a deadline earlier
return lost
