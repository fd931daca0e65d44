local out = {}
for i = 1, #ARGV, 9 do
  local f = ARGV[i]
  local cur = redis.call('HGET', KEYS[3], f)
  if cur then
    out[#out + 1] = 'S' .. cur
  else
    local q = redis.call('HGET', KEYS[2], f)
    if q then
      out[#out + 1] = 'Q' .. q
    elseif redis.call('HEXISTS', KEYS[4], ARGV[i + 1]) == 0 then
      out[#out + 1] = 'U'
    else
      local entry = {KEYS[1], '*', 't', ARGV[i + 1], 'i', ARGV[i + 2], 'y', ARGV[i + 3],
                     'p', ARGV[i + 4], 'h', ARGV[i + 5], 'm', ARGV[i + 7]}
      if ARGV[i + 6] ~= '' then
        entry[#entry + 1] = 'k'
        entry[#entry + 1] = ARGV[i + 6]
      end
      if ARGV[i + 8] ~= '' then
        entry[#entry + 1] = 'c'
        entry[#entry + 1] = ARGV[i + 8]
      end
      redis.call('XADD', unpack(entry))
      redis.call('HSET', KEYS[2], f, ARGV[i + 5] .. ARGV[i + 7])
      out[#out + 1] = 'N'
    end
  end
end
return out
