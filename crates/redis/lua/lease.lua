-- lease.lua: refill a global token bucket and take up to `want` whole tokens from it.
-- Runs after bucket.lua (KEYS[1], ARGV[1..4]: the bucket, L, T, B, now).
--
-- ARGV[5]  want: tokens asked for (>= 0)
-- Returns  {granted, remaining_millitokens}: granted = min(want, floor(tokens)); remaining is the
--          bucket after the grant, in thousandths of a token, rounded down.
local want = tonumber(ARGV[5])
local granted = math.floor(tokens)
if granted > want then granted = want end
if granted < 0 then granted = 0 end
tokens = tokens - granted
save()
return {granted, math.floor(tokens * 1000)}
