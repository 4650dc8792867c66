-- peek.lua: read a global bucket as it is now, without changing it.
-- Runs after bucket.lua (KEYS[1], ARGV[1..5]: the bucket, L, T, B, now, algorithm).
--
-- Returns  remaining_millitokens: what is available now, rounded down.
return math.floor(available() * 1000)
