-- add_after(key, delay): add now (delay <= 0) or keep one delayed entry per key, the earliest.
-- Invariant kept: at most one entry per key in delay; a later time never replaces an earlier one; an entry is
-- only turned into an add (by catch_up, in get/len) once its time has come, so nothing is added early.
-- ARGV: 1 now, 2 key, 3 delay in seconds (a decimal string; "inf" = never).
-- Returns 1 DEDUP, 2 MARKED, 3 QUEUED (delay <= 0), 4 DELAYED, 5 DELAY_KEPT.
return add_delayed(ARGV[2], tonumber(ARGV[3]), now_us())
