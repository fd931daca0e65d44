local holder = redis.call('HGET', KEYS[1], 'node')
if holder and holder ~= ARGV[1] then
  return {0, holder, redis.call('HGET', KEYS[1], 'epoch') or ''}
end
local e = redis.call('INCR', KEYS[2])
local held = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0') or 0
if e <= held then
  e = held + 1
  redis.call('SET', KEYS[2], e)
end
redis.call('HSET', KEYS[1], 'node', ARGV[1], 'epoch', e)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, e}
