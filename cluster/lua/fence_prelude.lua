local rc_lease = redis.call('HMGET', KEYS[1], 'node', 'epoch')
if rc_lease[1] ~= ARGV[1] or rc_lease[2] ~= ARGV[2] then
  return redis.error_reply('FENCED ' .. KEYS[1] .. ' is held by ' .. (rc_lease[1] or '-') ..
                           ' at epoch ' .. (rc_lease[2] or '-') .. ', not ' .. ARGV[1] ..
                           ' at epoch ' .. ARGV[2])
end
