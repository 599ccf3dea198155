-- keyqueue Redis library: the functions every operation script may use. It never runs on its own: the text sent
-- for an operation is this prologue (down to the first function), then only the functions the operation calls
-- (directly or through another function), then the operation's own file (keyqueue.redis._protocol.script_source
-- links them). Defining a function or a key name costs Redis time on every call, so a script carries only what it
-- uses.
--
-- One queue is the keys under one hash tag "{name}", so they share one hash slot on Redis Cluster. Every key a
-- script touches is declared in KEYS, in this order, for every operation (one packed head per operation): the
-- cluster client routes the call by them and Redis checks them, so while the queue's slot migrates a script is
-- refused (TRYAGAIN, or ASK then TRYAGAIN on the importing node) rather than run against half-moved state. The
-- keys, "kq:{name}:" .. role:
--   fifo       list    keys waiting to be handed out, head first: exactly the keys whose state is "waiting", once
--   state      hash    key -> its state, one entry per key that is dirty or handed out (absent: neither):
--                        "<since>"                    waiting (dirty, in the fifo, not in proc); "" if the time
--                                                     is unknown (an add of a handle without metrics)
--                        "@<token|holder>"            handed out under that lease (in proc), not re-added
--                        "!<token|holder> <since>"    handed out and re-added meanwhile (done() queues it again)
--                      <since> is the time (microseconds of queue time) the key became dirty:
--                      workqueue_queue_duration starts there. The entry starts with "@" or "!" exactly when the key
--                      is in proc, so one HGET answers "dirty?", "being processed?" and "whose lease?"
--   proc       zset    keys handed out and not finished -> lease deadline (microseconds of queue time)
--   delay      zset    delayed keys -> ready time (microseconds); one entry per key, the earliest
--   notify     list    wake-up tokens for blocked getters (BLPOP); at most NOTIFY_CAP entries
--   fail       hash    "<limiter index>:<key>" -> failure count of a per-key rate limiter
--   bucket     hash    "<limiter index>:tokens" / "<limiter index>:last" of a token bucket
--   seq        string  the last fencing token: every lease gets a larger one, at least the queue time in µs (get)
--   counters   hash    expired (leases that ran out and were handed out again), redelivered (done() queued a
--                      re-added key again), marks and unmarked (keys that became "!"; "!" keys whose lease ran out):
--                      the "!" keys number marks - redelivered - unmarked, so the dirty keys are that plus the fifo;
--                      waits (the calls of handles with wait_replicas: each writes it right before its WAIT)
--   due        string  a lower bound of every score in proc and delay (microseconds; "inf": both empty); absent =
--                      unknown. A script that adds or lowers such a score lowers it too; removals leave it low. So
--                      when it is later than now nothing has run out or fallen due, and get/len skip reading proc
--                      and delay (one GET instead of two ZCOUNTs); once now reaches it, they catch up and set it
--                      exactly again (catch_up)
--   dirty, lease          the hashes of an older keyqueue's layout: only layout and delete read them
-- ARGV[1] is the queue time in microseconds, or "" to read the Redis server's clock (TIME), in every script but
-- done (which reads no clock; and add's "-": no clock needed, since_text): the server's clock decides leases, delays
-- and the bucket, whatever the clients' clocks say.
-- Numbers passed to redis.call are formatted by Redis with 17 significant digits, exact for the integer
-- microsecond times used here; only text built in Lua (replies, hash values) needs int() (Lua's own number
-- formatting keeps 14 digits). Formatting a number costs Redis ~0.4 µs either way, so the hot paths pass text they
-- already have where they can (since_text).
-- One key name per line: a script keeps only the names its code uses (script_source drops the others).
local FIFO = KEYS[1]
local STATE = KEYS[2]
local PROC = KEYS[3]
local DELAY = KEYS[4]
local NOTIFY = KEYS[5]
local FAIL = KEYS[6]
local BUCKET = KEYS[7]
local SEQ = KEYS[8]
local COUNTERS = KEYS[9]
local DUE = KEYS[10]
local OLD_DIRTY = KEYS[11]
local OLD_LEASE = KEYS[12]
local NOTIFY_CAP = 32
local BATCH = 1000 -- most expired leases / due delayed keys moved by one script (the rest by the next one)
local INF = math.huge
-- Go's InfDuration (2^63-1 ns) in seconds: a longer delay means "never".
local MAX_DELAY_S = 9223372036.854775807

-- Integers as exact decimal strings, for text built in Lua (concatenation would keep 14 digits).
local function int(n)
  return string.format('%.0f', n)
end

-- Floats as round-trip decimal strings.
local function flt(x)
  if x == INF then return 'inf' end
  return string.format('%.17g', x)
end

local function now_us()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- An add's time for the key's entry as exact decimal text (what is stored), without formatting a number: ARGV[1]
-- itself, or TIME's two parts for "", or "" (unknown) for "-": the caller records no metrics and does not ask for
-- the clock (the time is only read for workqueue_queue_duration).
local function since_text()
  if ARGV[1] ~= '' then
    if ARGV[1] == '-' then return '' end
    return ARGV[1]
  end
  local t = redis.call('TIME')
  local us = t[2]
  return t[1] .. string.sub('00000', #us) .. us
end

local function notify()
  if redis.call('LLEN', NOTIFY) < NOTIFY_CAP then
    redis.call('RPUSH', NOTIFY, '1')
  end
end

-- The add of the state machine for a key without a state entry: 3 = QUEUED (joined the fifo tail). since is when
-- it became dirty: exact decimal text (since_text, a score read from Redis) or a number.
local function add_clean(key, since)
  redis.call('HSET', STATE, key, since)
  redis.call('RPUSH', FIFO, key)
  notify()
  return 3
end

-- The add of the state machine for a key handed out and not re-added (its "@" entry v): 2 = MARKED (done() queues
-- it once more).
local function add_held(key, v, since)
  if type(since) == 'number' then since = int(since) end
  redis.call('HSET', STATE, key, '!' .. string.sub(v, 2) .. ' ' .. since)
  redis.call('HINCRBY', COUNTERS, 'marks', 1)
  return 2
end

-- The add of the state machine for a key whose state entry is v (false: none; see the key list): add_clean,
-- 1 = DEDUP (dirty already: waiting, or "!"), or add_held.
local function add_state(key, v, since)
  if not v then
    return add_clean(key, since)
  end
  if string.byte(v) ~= 64 then -- not "@"
    return 1
  end
  return add_held(key, v, since)
end

-- The add of the state machine (add_state of the key's current entry).
local function add_now(key, now)
  return add_state(key, redis.call('HGET', STATE, key), now)
end

-- The due hint (see the key list above) as a number: -INF when unknown (absent), INF when proc and delay are empty.
local function read_due()
  local d = redis.call('GET', DUE)
  if not d then return -INF end
  if d == 'inf' then return INF end
  return tonumber(d)
end

local function write_due(t)
  if t == INF then
    redis.call('SET', DUE, 'inf')
  else
    redis.call('SET', DUE, int(t))
  end
end

-- A score t was just added to proc or delay (or an existing one lowered to t): keep due a lower bound.
local function lower_due(t)
  if t < read_due() then write_due(t) end
end

-- Seconds -> microseconds of delay, as the in-process queue turns seconds into nanoseconds: at least one unit,
-- rounded, and "never" (INF) from Go's InfDuration on. Callers handle delay <= 0 (now) first.
local function delay_us(delay)
  if delay >= MAX_DELAY_S then
    return INF
  end
  return math.max(1, math.floor(delay * 1000000 + 0.5))
end

-- add_after's decision: <= 0 adds now; otherwise 4 = DELAYED (stored, or moved earlier), 5 = DELAY_KEPT (an
-- earlier entry of this key exists). Earliest wins; a plain add never cancels a delayed entry.
local function add_delayed(key, delay, now)
  if delay <= 0 then
    return add_now(key, now)
  end
  local ready = now + delay_us(delay)
  local current = redis.call('ZSCORE', DELAY, key)
  if current and tonumber(current) <= ready then
    return 5
  end
  redis.call('ZADD', DELAY, flt(ready), key)
  lower_due(ready)
  notify() -- a blocked getter re-computes how long it may sleep
  return 4
end

-- get's and len's first step when the due hint (read_due) is not later than now: something may have run out or
-- fallen due. The callers call it in their cold part (keyqueue.redis._protocol.script_source), so that it and what
-- only it uses are not even defined when the hint says nothing is due (the common case: one GET). Its three parts
-- are written out here rather than as functions of their own: a function defined in a script is created on every
-- call that reaches its definition.
-- 1. Leases whose deadline has passed: the key goes back to the fifo tail, waiting (it still needs processing: its
--    holder never confirmed it; dirty since it was re-added, if it was, else since now) and its lease is gone with
--    its "@"/"!" entry, so the old holder's done() and renewals find another entry.
-- 2. Delayed keys that are due, earliest first, go through add_now as of their due time (a key's queue duration
--    starts when it fell due, as in client-go).
-- 3. The due time afterwards: the earliest score left in delay and proc (INF: none).
-- Returns the reclaimed keys (false if none), how many of them became dirty here (were not re-added meanwhile:
-- metrics count those as adds of the handle whose script ran this), how many delayed keys fired, how many of them
-- made their key dirty (the others found it dirty already), and the exact due time afterwards, which the caller
-- writes (write_due) once, after any score it adds.
local function catch_up(now)
  local expired = redis.call('ZRANGEBYSCORE', PROC, '-inf', now, 'LIMIT', 0, BATCH)
  local reclaimed, unmarked = 0, 0
  for _, key in ipairs(expired) do
    redis.call('ZREM', PROC, key)
    local v = redis.call('HGET', STATE, key)
    local since = now
    if v and string.byte(v) == 33 then -- "!": re-added meanwhile, dirty since then
      since = string.sub(v, string.find(v, ' ', 1, true) + 1)
      unmarked = unmarked + 1
    else
      reclaimed = reclaimed + 1
    end
    redis.call('HSET', STATE, key, since) -- waiting: the old lease is gone with its entry
    redis.call('RPUSH', FIFO, key)
    notify()
  end
  if #expired > 0 then
    redis.call('HINCRBY', COUNTERS, 'expired', #expired)
    if unmarked > 0 then redis.call('HINCRBY', COUNTERS, 'unmarked', unmarked) end
  else
    expired = false
  end
  local ready = redis.call('ZRANGEBYSCORE', DELAY, '-inf', now, 'WITHSCORES', 'LIMIT', 0, BATCH)
  local promoted = 0
  for i = 1, #ready, 2 do
    local key = ready[i]
    redis.call('ZREM', DELAY, key)
    if add_now(key, ready[i + 1]) ~= 1 then promoted = promoted + 1 end -- dirty since it fell due (Redis's text)
  end
  local due = INF
  local d = redis.call('ZRANGE', DELAY, 0, 0, 'WITHSCORES')
  if d[2] then due = tonumber(d[2]) end
  local p = redis.call('ZRANGE', PROC, 0, 0, 'WITHSCORES')
  if p[2] and tonumber(p[2]) < due then due = tonumber(p[2]) end
  return expired, reclaimed, #ready / 2, promoted, due
end
