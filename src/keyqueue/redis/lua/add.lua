-- add(key): one add of the state machine.
-- Invariant kept: a key is in the fifo at most once, only while it is waiting (dirty and not in proc); a key that
-- is in proc ("@" entry) only becomes "!" (its done() queues it again, once). Nothing is dropped here: shutdown is
-- per handle and decided by the caller, which never sends the add.
-- The dedup path (the key is dirty already: a waiting or "!" entry) is one HGET: the clock is read only when the
-- key becomes dirty, as text (since_text: storing a number would make Redis format it), and not at all for a
-- caller without metrics.
-- ARGV: 1 now ("" = TIME, "-" = no time needed), 2 key.  Returns 1 DEDUP, 2 MARKED, 3 QUEUED.
local key = ARGV[2]
local v = redis.call('HGET', STATE, key)
if not v then -- clean: it joins the fifo
  --: cold (each path defines only what it uses)
  return add_clean(key, since_text())
  --: end cold
end
if string.byte(v) ~= 64 then -- not "@": dirty already
  return 1
end
--: cold
return add_held(key, v, since_text())
