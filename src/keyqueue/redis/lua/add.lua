-- add(key): one add of the state machine.
-- Invariant kept: a key is in the fifo at most once, only while it is dirty and not in proc; a key that is in
-- proc is only marked dirty (its done() queues it again, once). Nothing is dropped here: shutdown is per handle
-- and decided by the caller, which never sends the add.
-- The dedup path (the key is dirty already) is one HEXISTS: the clock is read only when the key becomes dirty.
-- ARGV: 1 now ("" = TIME), 2 key.  Returns 1 DEDUP, 2 MARKED, 3 QUEUED.
local key = ARGV[2]
if redis.call('HEXISTS', DIRTY, key) == 1 then
  return 1
end
return add_clean(key, now_us())
