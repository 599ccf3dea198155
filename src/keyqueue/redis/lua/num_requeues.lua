-- num_requeues(key, index...): the largest failure count of this key over the per-key limiters (0 if none).
-- Invariant kept: read only.
-- ARGV: 1 now (unused), 2 key, then the indexes of the per-key limiters.
local best = 0
for i = 3, #ARGV do
  local n = tonumber(redis.call('HGET', FAIL, ARGV[i] .. ':' .. ARGV[2]) or '0')
  if n > best then best = n end
end
return best
