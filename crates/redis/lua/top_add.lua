-- Adds one instance's denied hits into a slot's fleet-wide count (`sluice quota top`) and keeps
-- the slot's heaviest members only, so the set stays bounded however many instances add to it.
-- KEYS[1]: the slot's sorted set. ARGV[1]: seconds to keep it; ARGV[2]: members kept; then
-- member, hits pairs (member: a bucket's store key).
local key = KEYS[1]
for i = 3, #ARGV - 1, 2 do
  redis.call('ZINCRBY', key, ARGV[i + 1], ARGV[i])
end
local keep = tonumber(ARGV[2])
local n = redis.call('ZCARD', key)
if n > keep then
  redis.call('ZREMRANGEBYRANK', key, 0, n - keep - 1)
end
redis.call('EXPIRE', key, ARGV[1])
return n
