-- forget(key, index...): the key succeeded: its per-key rate limiters start over.
-- Invariant kept: only the failure counts of this key change; the queue and the token bucket are untouched.
-- ARGV: 1 now (unused), 2 key, then the indexes of the per-key limiters.  Returns how many counts were cleared.
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i] .. ':' .. ARGV[2]
end
if #fields == 0 then return 0 end
return redis.call('HDEL', FAIL, unpack(fields))
