-- layout(): how many keys of an older keyqueue's layout the queue holds (its dirty and lease hashes, before the
-- per-key state hash): this version's scripts would not see what they record. Each handle runs it once, before
-- its first operation, and refuses the queue if the answer is not 0.
-- Invariant kept: read only.
return redis.call('EXISTS', OLD_DIRTY, OLD_LEASE)
