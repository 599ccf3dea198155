-- wake(): put one wake-up token on the shared list, for a getter that leaves (timed out) with a token it took,
-- which may have announced a new, earlier delayed key: another blocked getter then re-computes its wait.
-- Invariant kept: queue state is untouched; the list stays bounded (NOTIFY_CAP).
-- ARGV: 1 now (unused).
notify()
return 1
