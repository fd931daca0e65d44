local l = redis.call('HMGET', KEYS[1], 'node', 'epoch')
if l[1] == ARGV[1] and l[2] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if not l[1] then return 0 end
return -1
