-- peek.lua: read a global bucket as it is now, without changing it.
-- Runs after bucket.lua (KEYS[1], ARGV[1..5]: the bucket, L, T, B, now, algorithm).
--
-- Returns  remaining_millitokens: what is available now, rounded down. Concurrency (algorithm
--          3): the slots of holders that lapsed are freed first (the one write).
if algorithm == 3 and existed then
  reclaim()
  save()
end
return math.floor(available() * 1000)
