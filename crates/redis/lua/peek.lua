-- peek.lua: read a global token bucket as it is now, without changing it.
-- Runs after bucket.lua (KEYS[1], ARGV[1..4]: the bucket, L, T, B, now).
--
-- Returns  remaining_millitokens, rounded down.
return math.floor(tokens * 1000)
