redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], ARGV[1], ARGV[5]) end
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[4])
if #gone > 0 then
  redis.call('ZREM', KEYS[1], unpack(gone))
  redis.call('HDEL', KEYS[2], unpack(gone))
end
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[3], '+inf')
local addrs = {}
if #live > 0 then addrs = redis.call('HMGET', KEYS[2], unpack(live)) end
return {live, addrs}
