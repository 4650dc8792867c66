-- charge.lua: charge usage reported after the fact (post-paid), whatever is left: the bucket may
-- go into debt, down to -max_debt, and refills out of it. sluice_core::bucket's
-- BucketState::charge, line for line.
-- Runs after bucket.lua (KEYS[1], ARGV[1..4]: the bucket, L, T, B, now).
--
-- ARGV[5]  tokens to charge (>= 0; may be huge: clamped at the debt bound)
-- ARGV[6]  max_debt (>= 0, at most 2^53: sluice checks it at config load)
-- Returns  {charged, remaining_millitokens}: charged = the tokens, or the whole tokens left above
--          -max_debt if fewer; remaining is the bucket after it, in thousandths, rounded down
--          (negative in debt).
local n = tonumber(ARGV[5])
local floor = -tonumber(ARGV[6])
local room = math.floor(tokens - floor)
if room < 0 then room = 0 end
local charged = n
if charged > room then charged = room end
local after = tokens - charged
if after < floor and floor < tokens then after = floor end
tokens = after
save()
return {charged, math.floor(tokens * 1000)}
