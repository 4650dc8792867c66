-- lease.lua: bring a global bucket up to now and take up to `want` whole tokens from it.
-- Runs after bucket.lua (KEYS[1], ARGV[1..5]: the bucket, L, T, B, now, algorithm).
--
-- ARGV[6]  want: tokens asked for (>= 0)
-- ARGV[7]  least (optional, default `want`): of the grant, only `least` may leave the bucket
--          below half its burst (a cold lease takes its extra only from a bucket far from its
--          limit)
-- Returns  {granted, remaining_millitokens, window, ends_in}: granted = min(want, floor of what
--          is available, max(least, floor of what is available above half the burst));
--          remaining is what is available after the grant, in thousandths of a token, rounded
--          down; window and ends_in (µs) name the window the tokens belong to and when it ends
--          ({0, -1} for a token bucket). The arithmetic is BucketState::take_keeping_half's.
local want = tonumber(ARGV[6])
local least = want
if ARGV[7] ~= nil and ARGV[7] ~= '' then least = tonumber(ARGV[7]) end
local avail = available()
local granted = math.floor(avail)
if granted > want then granted = want end
if granted < 0 then granted = 0 end
local above_half = math.floor(avail - burst / 2)
if above_half < 0 then above_half = 0 end
if least < above_half then least = above_half end
if granted > least then granted = least end
tokens = tokens - granted
save()
local window, ends_in = window_answer()
return {granted, math.floor(available() * 1000), window, ends_in}
