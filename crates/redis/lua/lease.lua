-- lease.lua: refill a global token bucket and take up to `want` whole tokens from it.
--
-- KEYS[1]  the bucket: a hash {tokens, ts}; absent means full. One key per call (Redis Cluster:
--          the key carries its own {hash tag}).
-- ARGV[1]  requests_per_unit (L)
-- ARGV[2]  unit length in microseconds (T)
-- ARGV[3]  burst (B)
-- ARGV[4]  want: tokens asked for (>= 0)
-- ARGV[5]  now in microseconds; empty: use Redis TIME (one clock for every sidecar). Tests pass it.
-- Returns  {granted, remaining_millitokens}: granted = min(want, floor(tokens)); remaining is the
--          bucket after the grant, in thousandths of a token, rounded down.
--
-- The arithmetic is the same as sluice_core::bucket (f64, `tokens + elapsed * L / T`, capped at B,
-- a clock going backwards adds nothing), and tokens are stored with 17 significant digits, so Lua
-- and Rust agree bit for bit on the same inputs.
local rpu = tonumber(ARGV[1])
local unit = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
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
  tokens = burst
  ts = now
end
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens = math.min(tokens + elapsed * rpu / unit, burst)
if now > ts then ts = now end

local granted = math.floor(tokens)
if granted > want then granted = want end
if granted < 0 then granted = 0 end
tokens = tokens - granted

redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', string.format('%d', ts))
-- Expire once the bucket would be full again (a full bucket and an absent one are the same).
local ttl_ms
if rpu > 0 then
  ttl_ms = math.ceil((burst - tokens) * unit / rpu / 1000) + 1000
else
  ttl_ms = math.ceil(unit / 1000)
end
redis.call('PEXPIRE', KEYS[1], ttl_ms)
return {granted, math.floor(tokens * 1000)}
