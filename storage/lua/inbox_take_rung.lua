local rung = redis.call('SMEMBERS', KEYS[1])
if #rung == 0 then return {} end
local mine = {}
for i = 1, #ARGV do mine[ARGV[i]] = true end
local out = {}
for _, p in ipairs(rung) do
  if mine[p] then out[#out + 1] = p end
end
if #out > 0 then redis.call('SREM', KEYS[1], unpack(out)) end
return out
