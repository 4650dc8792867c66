-- The summed counts of the slots KEYS (`sluice quota top`), as member, hits, member, hits, ...
-- Every slot key has the hash tag {top}: one cluster slot, so one script may read them all.
local args = {'ZUNION', #KEYS}
for _, key in ipairs(KEYS) do
  args[#args + 1] = key
end
args[#args + 1] = 'WITHSCORES'
return redis.call(unpack(args))
