-- lease.lua: bring a global bucket up to now and take up to `want` whole tokens from it.
-- Runs after bucket.lua (KEYS[1], ARGV[1..5]: the bucket, L, T, B, now, algorithm).
--
-- ARGV[6]  want: tokens asked for (>= 0)
-- Returns  {granted, remaining_millitokens, window, ends_in}: granted = min(want, floor of what
--          is available); remaining is what is available after the grant, in thousandths of a
--          token, rounded down; window and ends_in (µs) name the window the tokens belong to
--          and when it ends ({0, -1} for a token bucket).
local want = tonumber(ARGV[6])
local granted = math.floor(available())
if granted > want then granted = want end
if granted < 0 then granted = 0 end
tokens = tokens - granted
save()
local window, ends_in = window_answer()
return {granted, math.floor(available() * 1000), window, ends_in}
