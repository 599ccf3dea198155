-- add_rate_limited(key, limiter): record a failure of key in the shared limiter state, then add_after(key, delay).
-- Invariant kept: the limiter state (per-key failure counts in fail, the one token bucket in bucket) changes
-- exactly as keyqueue.ratelimit's limiters change on when(key), in the same script as the add that uses the delay,
-- so concurrent handles on any host see one limiter; time is the queue time of lib.lua (Redis TIME by default).
-- ARGV: 1 now, 2 key, 3 limiter tree as JSON (see keyqueue.redis._protocol.limiter_tree), 4 "1" to record the
-- failure only, without the add (a handle that is shut down: client-go still consults its limiter).
-- Returns {add_after's result (0 when recording only), the delay in seconds as a string}.
local now = now_us()
local key = ARGV[2]

-- JSON has no infinity: the tree writes it as the string "inf".
local function num(x)
  if x == 'inf' then return INF end
  return x
end

local function when(node)
  local kind = node.t
  if kind == 'exp' then
    local field = node.i .. ':' .. key
    local exp = tonumber(redis.call('HGET', FAIL, field) or '0')
    redis.call('HSET', FAIL, field, int(exp + 1))
    local base, max = num(node.base), num(node.max)
    if exp >= 1024 then -- 2^1024 overflows a double; any base > 0 is far past any cap by then
      if base > 0 then return max end
      return 0
    end
    return math.min(base * 2 ^ exp, max)
  elseif kind == 'fastslow' then
    local field = node.i .. ':' .. key
    local n = tonumber(redis.call('HGET', FAIL, field) or '0') + 1
    redis.call('HSET', FAIL, field, int(n))
    if n <= node.maxfast then return num(node.fast) end
    return num(node.slow)
  elseif kind == 'bucket' then
    if node.qps == 'inf' then return 0 end
    local qps = node.qps
    local tkey, lkey = node.i .. ':tokens', node.i .. ':last'
    local tokens = tonumber(redis.call('HGET', BUCKET, tkey) or flt(node.burst))
    local last = redis.call('HGET', BUCKET, lkey)
    if last and now > tonumber(last) then
      tokens = tokens + (now - tonumber(last)) / 1000000 * qps
    end
    tokens = math.min(node.burst, tokens) - 1
    local wait
    if tokens >= 0 then
      wait = 0
    elseif qps > 0 then
      wait = -tokens / qps
    else
      wait = INF
    end
    if node.burst < 1 or wait == INF then
      return INF -- not granted: nothing is consumed
    end
    redis.call('HSET', BUCKET, tkey, flt(tokens), lkey, int(now))
    if wait > MAX_DELAY_S then return INF end
    return wait
  elseif kind == 'max' then
    local delay = 0
    for _, child in ipairs(node.c) do
      delay = math.max(delay, when(child))
    end
    return delay
  elseif kind == 'maxwait' then
    return math.min(when(node.c[1]), num(node.max))
  end
  error('keyqueue: unknown rate limiter node ' .. tostring(kind))
end

local delay = when(cjson.decode(ARGV[3]))
if ARGV[4] == '1' then
  return {0, flt(delay)}
end
return {add_delayed(key, delay, now), flt(delay)}
