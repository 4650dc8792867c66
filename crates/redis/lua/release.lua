-- release.lua: put unspent leased tokens back into a global token bucket, capped at the burst.
--
-- KEYS[1]  the bucket hash {tokens, ts}; absent means full (then there is nothing to add).
-- ARGV[1]  requests_per_unit (L)
-- ARGV[2]  unit length in microseconds (T)
-- ARGV[3]  burst (B)
-- ARGV[4]  tokens to give back (>= 0)
-- ARGV[5]  now in microseconds; empty: Redis TIME.
-- Returns  remaining_millitokens after the return, rounded down.
local rpu = tonumber(ARGV[1])
local unit = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local back = tonumber(ARGV[4])
local now
if ARGV[5] ~= nil and ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
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
if now > ts then ts = now end
tokens = math.min(tokens + back, burst)

redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', string.format('%d', ts))
local ttl_ms
if rpu > 0 then
  ttl_ms = math.ceil((burst - tokens) * unit / rpu / 1000) + 1000
else
  ttl_ms = math.ceil(unit / 1000)
end
redis.call('PEXPIRE', KEYS[1], ttl_ms)
return math.floor(tokens * 1000)
