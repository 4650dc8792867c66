-- release.lua: put unspent leased tokens back into a global bucket, capped at the burst.
-- Runs after bucket.lua (KEYS[1], ARGV[1..5]: the bucket, L, T, B, now, algorithm).
--
-- ARGV[6]  tokens to give back (>= 0)
-- ARGV[7]  windows: the window they were leased from (the grant's); ignored for a token bucket
-- ARGV[8]  concurrency (algorithm 3): the caller's holder id; it gives back at most what it
--          holds, and its lapse moves on if it still holds some
-- Returns  remaining_millitokens after the return, rounded down. An absent bucket is full, so
--          there is nothing to add and nothing is written; tokens of a window that is over are
--          dropped (the next window has its own L), and nothing is written either.
if not existed then
  return math.floor(burst * 1000)
end
if algorithm == 3 then
  reclaim()
  local back = -hold(ARGV[8], -tonumber(ARGV[6]))
  tokens = math.min(tokens + back, burst)
  save()
  return math.floor(available() * 1000)
end
if algorithm ~= 0 and window_of(ts) ~= tonumber(ARGV[7]) then
  return math.floor(available() * 1000)
end
tokens = math.min(tokens + tonumber(ARGV[6]), burst)
save()
return math.floor(available() * 1000)
