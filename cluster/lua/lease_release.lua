local l = redis.call('HMGET', KEYS[1], 'node', 'epoch')
if l[1] == ARGV[1] and l[2] == ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
