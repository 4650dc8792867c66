-- release.lua: put unspent leased tokens back into a global token bucket, capped at the burst.
-- Runs after bucket.lua (KEYS[1], ARGV[1..4]: the bucket, L, T, B, now).
--
-- ARGV[5]  tokens to give back (>= 0)
-- Returns  remaining_millitokens after the return, rounded down. An absent bucket is full, so
--          there is nothing to add and nothing is written.
if not existed then
  return math.floor(burst * 1000)
end
tokens = math.min(tokens + tonumber(ARGV[5]), burst)
save()
return math.floor(tokens * 1000)
