-- close.lua: close the current window of a fixed-window bucket (nothing left in it, debt kept):
-- a denial counted as envoyproxy/ratelimit counts it (its hits push the counter past the limit).
-- sluice_core::bucket's BucketState::close.
-- Runs after bucket.lua (KEYS[1], ARGV[1..5]: the bucket, L, T, B, now, algorithm).
--
-- ARGV[6]  the window to close; a later window (the call arrived after the edge) is left alone
-- Returns  remaining_millitokens after it, rounded down. An absent bucket is left absent, and
--          a bucket of another algorithm as it is.
if not existed then
  return math.floor(burst * 1000)
end
if algorithm == 1 and window_of(ts) == tonumber(ARGV[6]) then
  if tokens > 0 then tokens = 0 end
  save()
end
return math.floor(available() * 1000)
