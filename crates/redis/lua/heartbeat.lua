-- heartbeat.lua: register this instance as live and count the live ones.
--
-- KEYS[1]  a sorted set of instance ids scored by their last heartbeat (milliseconds).
-- ARGV[1]  this instance's id
-- ARGV[2]  how long an instance counts as live after its last heartbeat, in milliseconds
-- ARGV[3]  "leave": remove this instance instead (at shutdown)
-- Returns  the number of live instances.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
if ARGV[3] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now_ms, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZCARD', KEYS[1])
