-- demand.lua: record one client's demand for a bucket and read every live client's (RLQS shares:
-- each sidecar sizes its Envoys' shares from all of them, Doorman's wants -> shares).
-- Touches one key, with the bucket's hash tag, so it works the same on a cluster.
--
-- KEYS[1]  a hash: client id -> "<demand in milli-requests per second>:<expiry in ms>"
-- ARGV[1]  the client's id
-- ARGV[2]  its demand in milli-requests per second (0: withdraw it)
-- ARGV[3]  how long a demand counts, in milliseconds
-- Returns  every unexpired demand (this client's included), in milli-requests per second.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
if tonumber(ARGV[2]) > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. string.format('%d', now + ttl))
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
local live = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local d, exp = string.match(all[i + 1], '^(%d+):(%d+)$')
  if d and tonumber(exp) > now then
    live[#live + 1] = tonumber(d)
  else
    redis.call('HDEL', KEYS[1], all[i])
  end
end
if #live > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return live
