-- heartbeat.lua: register this instance as live and count the live ones.
--
-- KEYS[1]  a sorted set of instance ids scored by when each stops counting as live (its
--          deadline, in milliseconds): three of the intervals it was told at its last heartbeat.
-- ARGV[1]  this instance's id
-- ARGV[2]  the configured heartbeat interval, in milliseconds
-- ARGV[3]  "leave": remove this instance instead (at shutdown)
-- ARGV[4]  heartbeats a second the whole fleet may send: with more live instances than that
--          per interval, each is told to wait `live / ARGV[4]` seconds instead, so a fleet of
--          any size costs Redis about that many calls a second.
-- Returns  {live instances, milliseconds until this instance's next heartbeat}.
--
-- Each member keeps the deadline its own interval gave it, so a fleet that shrinks (a shorter
-- interval for the next callers) never drops members still waiting out a longer one.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if ARGV[3] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {redis.call('ZCARD', KEYS[1]), interval}
end
local live = redis.call('ZCARD', KEYS[1])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then live = live + 1 end
local budget = tonumber(ARGV[4])
local stretched = math.ceil(live * 1000 / budget)
if stretched > interval then interval = stretched end
redis.call('ZADD', KEYS[1], now_ms + 3 * interval, ARGV[1])
-- The set goes when its last member's deadline passes.
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
-- (Formatted: a score comes back as a float's text, which PEXPIREAT may refuse.)
redis.call('PEXPIREAT', KEYS[1], string.format('%d', tonumber(last[2])))
return {live, interval}
