-- peek.lua: read a global token bucket as it is now, without changing it.
--
-- KEYS[1]  the bucket hash {tokens, ts}; absent means full.
-- ARGV[1]  requests_per_unit (L)
-- ARGV[2]  unit length in microseconds (T)
-- ARGV[3]  burst (B)
-- ARGV[4]  now in microseconds; empty: Redis TIME.
-- Returns  remaining_millitokens, rounded down.
local rpu = tonumber(ARGV[1])
local unit = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local now
if ARGV[4] ~= nil and ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  return math.floor(burst * 1000)
end
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens = math.min(tokens + elapsed * rpu / unit, burst)
return math.floor(tokens * 1000)
