-- add(key): one add of the state machine.
-- Invariant kept: a key is in the fifo at most once, only while it is dirty and not in proc; a key that is in
-- proc is only marked dirty (its done() queues it again, once). Nothing is dropped here: shutdown is per handle
-- and decided by the caller, which never sends the add.
-- ARGV: 1 now ("" = TIME), 2 key.  Returns 1 DEDUP, 2 MARKED, 3 QUEUED.
return add_now(ARGV[2], now_us())
