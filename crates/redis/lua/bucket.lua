-- bucket.lua: the prelude every bucket script starts with (sluice prepends it when it loads
-- lease.lua, release.lua, peek.lua and charge.lua, so the time rules are written once).
--
-- KEYS[1]  the bucket: a hash {tokens, ts[, prev]}; absent means full. One key per call (Redis
--          Cluster: the key carries its own {hash tag}).
-- ARGV[1]  requests_per_unit (L)
-- ARGV[2]  period in microseconds (T: the unit times unit_multiplier)
-- ARGV[3]  burst (B; L for windows)
-- ARGV[4]  now in microseconds; empty: use Redis TIME (one clock for every sidecar). Tests pass it.
-- ARGV[5]  algorithm: 0 token bucket, 1 fixed window, 2 sliding window
-- ARGV[6…] the script's own arguments (see each script)
--
-- Leaves `tokens` brought up to `now` and `ts` the later of the stored time and `now`:
-- - token bucket: refilled by `elapsed * L / T`, capped at B (a clock going backwards adds
--   nothing);
-- - windows (aligned to the epoch: window w is [w*T, (w+1)*T)): a bucket whose window is over
--   starts full; a sliding window keeps what the window just before used as `previous`, and
--   `available()` weighs it by the part of the trailing period that still covers it.
-- `existed` says whether the key was there. The arithmetic is sluice_core::bucket's and
-- sluice_core::window's (f64, integer microseconds), and `save` stores numbers with 17
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
local algorithm = tonumber(ARGV[5])

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'prev')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
local previous = tonumber(state[3]) or 0
local existed = tokens ~= nil and ts ~= nil
if not existed then
  tokens = burst
  ts = now
  previous = 0
end

-- The window of `t` and how far into it, by exact integer arithmetic (every value is an integer
-- below 2^53; the corrections undo a rounded division).
local function window_of(t)
  local w = math.floor(t / unit)
  local into = t - w * unit
  if into < 0 then
    w = w - 1
    into = into + unit
  elseif into >= unit then
    w = w + 1
    into = into - unit
  end
  return w, into
end

if algorithm == 0 then
  local elapsed = now - ts
  if elapsed < 0 then elapsed = 0 end
  tokens = math.min(tokens + elapsed * rpu / unit, burst)
else
  local then_w = window_of(ts)
  local now_w = window_of(now)
  if now_w > then_w then
    if algorithm == 2 and now_w == then_w + 1 then
      previous = burst - tokens
    else
      previous = 0
    end
    tokens = burst
  end
end
if now > ts then ts = now end

-- Tokens that can be spent now.
local function available()
  if algorithm == 2 then
    local _, into = window_of(ts)
    local f = into / unit
    return tokens - previous * (1 - f)
  end
  return tokens
end

-- What a grant names: the window the tokens come from and the microseconds until it ends
-- ({0, -1} for a token bucket, whose tokens never lapse).
local function window_answer()
  if algorithm == 0 then return 0, -1 end
  local w, into = window_of(ts)
  return w, unit - into
end

-- Stores the bucket and expires it once it would be full again (full and absent are the same):
-- a token bucket when it has refilled, a fixed window at its end, a sliding window at the end of
-- the next one. A token bucket that never refills (L = 0), or would take longer than 2^53 ms
-- to, is kept without an expiry: expiring it early would refill it. Everything that could fail
-- (the TTL's arithmetic and formatting: a Lua number converts to "3.7e+17", which PEXPIRE
-- rejects) is done before the write, so the write is never left without its expiry (a script
-- is not rolled back on an error).
local function save()
  local ttl_ms
  if algorithm == 0 then
    if rpu > 0 then
      ttl_ms = math.ceil((burst - tokens) * unit / rpu / 1000) + 1000
    end
  else
    local _, into = window_of(ts)
    ttl_ms = math.ceil((unit - into) / 1000) + 1000
    if algorithm == 2 then ttl_ms = ttl_ms + math.ceil(unit / 1000) end
  end
  local ttl
  if ttl_ms and ttl_ms < 9007199254740992 then
    ttl = string.format('%d', ttl_ms)
  end
  local tokens_text = string.format('%.17g', tokens)
  local ts_text = string.format('%d', ts)
  local previous_text = string.format('%.17g', previous)
  if algorithm == 2 then
    redis.call('HSET', KEYS[1], 'tokens', tokens_text, 'ts', ts_text, 'prev', previous_text)
  else
    redis.call('HSET', KEYS[1], 'tokens', tokens_text, 'ts', ts_text)
  end
  if ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  else
    redis.call('PERSIST', KEYS[1])
  end
end
