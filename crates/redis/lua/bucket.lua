-- bucket.lua: the prelude every bucket script starts with (sluice prepends it when it loads
-- lease.lua, release.lua and peek.lua, so the refill rule is written once).
--
-- KEYS[1]  the bucket: a hash {tokens, ts}; absent means full. One key per call (Redis Cluster:
--          the key carries its own {hash tag}).
-- ARGV[1]  requests_per_unit (L)
-- ARGV[2]  unit length in microseconds (T)
-- ARGV[3]  burst (B)
-- ARGV[4]  now in microseconds; empty: use Redis TIME (one clock for every sidecar). Tests pass it.
-- ARGV[5]  the script's own argument (see each script)
--
-- Leaves `tokens` refilled to `now` (capped at B; a clock going backwards adds nothing), `ts` the
-- later of the stored time and `now`, and `existed` whether the key was there. The arithmetic is
-- sluice_core::bucket's (f64, `tokens + elapsed * L / T`), and `save` stores tokens with 17
-- significant digits, so Lua and Rust agree bit for bit on the same inputs.
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
local existed = tokens ~= nil and ts ~= nil
if not existed then
  tokens = burst
  ts = now
end
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens = math.min(tokens + elapsed * rpu / unit, burst)
if now > ts then ts = now end

-- Stores the bucket and expires it once it would be full again (full and absent are the same).
-- A bucket that never refills (L = 0), or would take longer than 2^53 ms to, is kept without an
-- expiry: expiring it early would refill it. Everything that could fail (the TTL's arithmetic and
-- formatting: a Lua number converts to "3.7e+17", which PEXPIRE rejects) is done before the write,
-- so the write is never left without its expiry (a script is not rolled back on an error).
local function save()
  local ttl
  if rpu > 0 then
    local ttl_ms = math.ceil((burst - tokens) * unit / rpu / 1000) + 1000
    if ttl_ms < 9007199254740992 then
      ttl = string.format('%d', ttl_ms)
    end
  end
  local tokens_text = string.format('%.17g', tokens)
  local ts_text = string.format('%d', ts)
  redis.call('HSET', KEYS[1], 'tokens', tokens_text, 'ts', ts_text)
  if ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  else
    redis.call('PERSIST', KEYS[1])
  end
end
