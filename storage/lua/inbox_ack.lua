local n = tonumber(ARGV[1])
if n > 0 then redis.call('XDEL', KEYS[1], unpack(ARGV, 2, n + 1)) end
if #ARGV > n + 1 then redis.call('HDEL', KEYS[2], unpack(ARGV, n + 2, #ARGV)) end
return 1
