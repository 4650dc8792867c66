-- bucket.lua: the prelude every bucket script starts with (sluice prepends it when it loads
-- lease.lua, release.lua, peek.lua and charge.lua, so the time rules are written once).
--
-- KEYS[1]  the bucket: a hash {tokens, ts[, prev]}; absent means full. One key per call (Redis
--          Cluster: the key carries its own {hash tag}).
-- ARGV[1]  requests_per_unit (L)
-- ARGV[2]  period in microseconds (T: the unit times unit_multiplier)
-- ARGV[3]  burst (B; L for windows)
-- ARGV[4]  now in microseconds; empty: use Redis TIME (one clock for every sidecar). Tests pass it.
-- ARGV[5]  algorithm: 0 token bucket, 1 fixed window, 2 sliding window, 3 concurrency (slots:
--          L = 0, T = the hold timeout; see `holders` below)
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

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'prev', 'R', 'W', 'y', 'z')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
local previous = tonumber(state[3]) or 0
local existed = tokens ~= nil and ts ~= nil
if not existed then
  tokens = burst
  ts = now
  previous = 0
end
-- Leases of rate (token buckets; sluice_core::reserve, line for line): holder `id` reserves
-- 'g'..id thousandths of a token per period of L (it asked 'a'..id) until 'u'..id (µs). 'R' and
-- 'W' are the grants and the asks summed, 'y' a time no lapse comes before, 'z' one no lapse
-- comes after since the reservations were last empty (lease.lua answers it). While R > 0 the
-- bucket refills at L - R: `refill_to`.
local reserved = tonumber(state[4]) or 0
local reserve_asked = tonumber(state[5]) or 0
local lapse_at = tonumber(state[6])
local reserve_end = tonumber(state[7])
-- Holders whose reservation lapsed during this call, deleted by `save`; and the one change
-- `reserve` makes ({id, granted, asked, until}; granted nil: deleted).
local lapsed = {}
local reserve_change = nil
local reservations_changed = false

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

-- Refills the token bucket to `t` at L - R, or at L itself (with the very arithmetic of a
-- bucket that never had a reservation) when nothing is reserved.
local function refill_to(t)
  local elapsed = t - ts
  if elapsed < 0 then elapsed = 0 end
  if reserved == 0 then
    tokens = math.min(tokens + elapsed * rpu / unit, burst)
  else
    tokens = math.min(tokens + elapsed * (rpu * 1000 - reserved) / (unit * 1000), burst)
  end
  if t > ts then ts = t end
end

if algorithm == 0 and lapse_at ~= nil and lapse_at <= now then
  -- Reservations that lapsed by now go in the order they lapsed, each after the refill up to
  -- its lapse (at the R it was part of).
  reservations_changed = true
  local fields = redis.call('HGETALL', KEYS[1])
  local held = {}
  local ended = {}
  for i = 1, #fields, 2 do
    held[fields[i]] = fields[i + 1]
  end
  lapse_at = nil
  for f, v in pairs(held) do
    if string.sub(f, 1, 1) == 'u' then
      local u = tonumber(v)
      if u <= now then
        table.insert(ended, {u, string.sub(f, 2)})
      elseif lapse_at == nil or u < lapse_at then
        lapse_at = u
      end
    end
  end
  table.sort(ended, function(a, b) return a[1] < b[1] end)
  for _, e in ipairs(ended) do
    refill_to(e[1])
    reserved = reserved - (tonumber(held['g' .. e[2]]) or 0)
    reserve_asked = reserve_asked - (tonumber(held['a' .. e[2]]) or 0)
    lapsed[e[2]] = true
  end
  if reserve_asked == 0 then reserve_end = nil end
end

if algorithm == 0 then
  refill_to(now)
elseif algorithm == 3 then
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
  -- Concurrency: a holder's slots lapse a hold timeout after its last call (`holders`).
  if algorithm == 3 then return 0, unit end
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
  if algorithm == 3 then
    -- Every holder's slots lapse within a hold timeout of its last call, so once none has
    -- called for that long the key holds nothing: absent (all slots free) is then the truth.
    ttl_ms = math.ceil(unit / 1000) + 1000
  elseif algorithm == 0 then
    if rpu > 0 then
      ttl_ms = math.ceil((burst - tokens) * unit / rpu / 1000) + 1000
      -- Refilling more slowly while reservations last: full at the latest that long after
      -- the last of them lapses (an absent bucket is full and reserves nothing).
      if reserve_asked > 0 and reserve_end ~= nil and reserve_end > now then
        ttl_ms = ttl_ms + math.ceil((reserve_end - now) / 1000)
      end
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
  if reservations_changed then
    for id, _ in pairs(lapsed) do
      redis.call('HDEL', KEYS[1], 'g' .. id, 'a' .. id, 'u' .. id)
    end
    if reserve_change then
      local id = reserve_change[1]
      if reserve_change[2] then
        redis.call('HSET', KEYS[1], 'g' .. id, string.format('%d', reserve_change[2]),
          'a' .. id, string.format('%d', reserve_change[3]),
          'u' .. id, string.format('%d', reserve_change[4]))
      else
        redis.call('HDEL', KEYS[1], 'g' .. id, 'a' .. id, 'u' .. id)
      end
    end
    if reserve_asked > 0 then
      redis.call('HSET', KEYS[1], 'R', string.format('%d', reserved),
        'W', string.format('%d', reserve_asked), 'y', string.format('%d', lapse_at),
        'z', string.format('%d', reserve_end))
    else
      redis.call('HDEL', KEYS[1], 'R', 'W', 'y', 'z')
    end
  end
  if ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  else
    redis.call('PERSIST', KEYS[1])
  end
end

-- Concurrency (algorithm 3): who holds the slots taken from `tokens` (the free slots). Each
-- holder (a sluice instance, by a numeric id) has its count in field 'h'..id and when it lapses
-- (µs) in 'e'..id; 'x' is a time no lapse comes before. A holder's every call moves its lapse a
-- hold timeout (T) on; a holder that stops calling (killed, cut off from Redis) loses its slots
-- to the free ones at its lapse, which `reclaim` (run before any read of `tokens`) does. Free
-- plus held is the limit: a holder can give back only what it holds.
local function reclaim()
  local x = tonumber(redis.call('HGET', KEYS[1], 'x'))
  if x == nil or now < x then return end
  local fields = redis.call('HGETALL', KEYS[1])
  local next_x = nil
  for i = 1, #fields, 2 do
    local f = fields[i]
    if string.sub(f, 1, 1) == 'e' then
      local lapse = tonumber(fields[i + 1])
      local id = string.sub(f, 2)
      if lapse <= now then
        local held = tonumber(redis.call('HGET', KEYS[1], 'h' .. id)) or 0
        tokens = math.min(tokens + held, burst)
        redis.call('HDEL', KEYS[1], 'h' .. id, 'e' .. id)
      elseif next_x == nil or lapse < next_x then
        next_x = lapse
      end
    end
  end
  if next_x then
    redis.call('HSET', KEYS[1], 'x', string.format('%d', next_x))
  else
    redis.call('HDEL', KEYS[1], 'x')
  end
end

-- Adds `delta` (negative: gives back, at most what it holds) to holder `id`'s slots and moves
-- its lapse a hold timeout on; returns the change made. Run after `save` (the hash exists).
local function hold(id, delta)
  local held = tonumber(redis.call('HGET', KEYS[1], 'h' .. id)) or 0
  if delta < -held then delta = -held end
  held = held + delta
  if held > 0 then
    local lapse = now + unit
    redis.call('HSET', KEYS[1], 'h' .. id, string.format('%d', held), 'e' .. id,
      string.format('%d', lapse))
    local x = tonumber(redis.call('HGET', KEYS[1], 'x'))
    if x == nil or lapse < x then
      redis.call('HSET', KEYS[1], 'x', string.format('%d', lapse))
    end
  else
    redis.call('HDEL', KEYS[1], 'h' .. id, 'e' .. id)
  end
  return delta
end

-- What holder `id` holds (0: nothing).
local function held_by(id)
  return tonumber(redis.call('HGET', KEYS[1], 'h' .. id)) or 0
end

-- Replaces holder `id`'s reservation by one of `asked` thousandths of a token per period for
-- `ttl` µs and returns what is granted: min(asked, C - R of the others, C * asked / W when the
-- asks W, this one's included, are more than C), C what may be reserved now: 80% of L
-- (RESERVABLE_PER_MILLE: the rest always refills the bucket) while the bucket, after this
-- call's take, holds three quarters of its burst or more, none below a quarter, in proportion
-- between, and all of it while W (this ask uncapped) is 1.5 L or more (a starved key:
-- sluice_core::reserve's `reservable`). An ask or a ttl of 0 gives it back; only a token
-- bucket is reserved (sluice_core::reserve's Reservations::reserve). Before `save`.
local function reserve(id, asked, ttl)
  reservations_changed = true
  if not lapsed[id] then
    local old = redis.call('HMGET', KEYS[1], 'g' .. id, 'a' .. id)
    reserved = reserved - (tonumber(old[1]) or 0)
    reserve_asked = reserve_asked - (tonumber(old[2]) or 0)
    if reserve_asked == 0 then reserve_end = nil end
  end
  reserve_change = {id, nil}
  local total = rpu * 800
  if asked == 0 or ttl == 0 or algorithm ~= 0 or total == 0 or total >= 9007199254740992 then
    return 0
  end
  -- Whether the asks mark a starved key counts this one as asked, before it is capped.
  local starved = reserve_asked + asked >= rpu * 1500
  if asked > total then asked = total end
  local all = reserve_asked + asked
  local can = total
  if not starved then
    if burst == 0 then
      can = 0
    else
      local share = (4 * available() - burst) / (2 * burst)
      -- `not (share >= 0)` also takes a NaN to 0, as Rust's cast does.
      if not (share >= 0) then share = 0 elseif share > 1 then share = 1 end
      can = math.floor(total * share)
    end
  end
  local granted = asked
  if all > can then
    local fair = math.floor(can * asked / all)
    if fair < granted then granted = fair end
  end
  local free = can - reserved
  if free < 0 then free = 0 end
  if free < granted then granted = free end
  if ttl > 3600000000 then ttl = 3600000000 end
  local until_at = now + ttl
  reserve_change = {id, granted, asked, until_at}
  reserved = reserved + granted
  reserve_asked = all
  if lapse_at == nil or until_at < lapse_at then lapse_at = until_at end
  if reserve_end == nil or until_at > reserve_end then reserve_end = until_at end
  return granted
end
