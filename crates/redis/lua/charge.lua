-- charge.lua: charge usage reported after the fact (post-paid), whatever is left: the bucket may
-- go into debt, down to -max_debt, and refills out of it (a window: until the window ends).
-- sluice_core::bucket's BucketState::charge, line for line.
-- Runs after bucket.lua (KEYS[1], ARGV[1..5]: the bucket, L, T, B, now, algorithm).
--
-- ARGV[6]  tokens to charge (>= 0; may be huge: clamped at the debt bound)
-- ARGV[7]  max_debt (>= 0, at most 2^53: sluice checks it at config load)
-- Returns  {charged, remaining_millitokens, window, ends_in}: charged = the tokens, or the
--          whole tokens available above -max_debt if fewer; remaining is what is available
--          after it, in thousandths, rounded down (negative in debt); window and ends_in as
--          lease.lua answers them.
local n = tonumber(ARGV[6])
local floor = -tonumber(ARGV[7])
-- What a sliding window's previous hits hold back (0 for the others).
local held = tokens - available()
local room = math.floor(tokens - held - floor)
if room < 0 then room = 0 end
local charged = n
if charged > room then charged = room end
local after = tokens - charged
local lowest = floor + held
if after < lowest and lowest < tokens then after = lowest end
tokens = after
save()
local window, ends_in = window_answer()
return {charged, math.floor(available() * 1000), window, ends_in}
