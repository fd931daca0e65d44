local pre = ARGV[3]
local checked = ARGV[5] == '1'
local n = #ARGV
local i = 6
if not checked then
  while i <= n do
    local c = tonumber(ARGV[i + 2])
    if ARGV[i] == 'E' then
      local k = pre .. ARGV[i + 1]
      for j = i + 3, i + 2 + c, 2 do
        local cur = redis.call('HGET', k, ARGV[j])
        if cur and string.sub(cur, 1, 8) ~= string.sub(ARGV[j + 1], 1, 8) then
          return redis.error_reply('CONFLICT an event with this id already exists for the tenant')
        end
      end
    end
    i = i + 3 + c
  end
  i = 6
end
local cmds = {H = 'HSET', D = 'HDEL', Z = 'ZADD', R = 'ZREM'}
while i <= n do
  local op, k, a = ARGV[i], pre .. ARGV[i + 1], i + 3
  local b = i + 2 + tonumber(ARGV[i + 2])
  local cmd = cmds[op]
  if cmd then
    if b >= a then redis.call(cmd, k, unpack(ARGV, a, b)) end
  elseif op == 'E' then
    if checked then
      if b >= a then redis.call('HSET', k, unpack(ARGV, a, b)) end
    else
      for j = a, b, 2 do
        if redis.call('HEXISTS', k, ARGV[j]) == 0 then redis.call('HSET', k, ARGV[j], ARGV[j + 1]) end
      end
    end
  elseif op == 'V' then
    -- One HMGET and one HSET for the group; a field named twice builds on its first value.
    local fs, vals, stored, order = {}, {}, {}, {}
    for j = a, b, 2 do fs[#fs + 1] = ARGV[j] end
    local curs = redis.call('HMGET', k, unpack(fs))
    for q = 1, #fs do
      local f, v = fs[q], ARGV[a + 2 * q - 1]
      local cur = vals[f] or curs[q]
      if not vals[f] then
        order[#order + 1] = f
        stored[f] = curs[q]
      end
      if not cur then
        vals[f] = v
      else
        local ch = 3 + string.byte(cur, 1) * 256 + string.byte(cur, 2)
        local add = {}
        for x = 3 + string.byte(v, 1) * 256 + string.byte(v, 2), #v, 8 do
          local id, seen = string.sub(v, x, x + 7), false
          for y = ch, #cur, 8 do
            if string.sub(cur, y, y + 7) == id then
              seen = true
              break
            end
          end
          if not seen then add[#add + 1] = id end
        end
        vals[f] = #add > 0 and cur .. table.concat(add) or cur
      end
    end
    local set = {}
    for q = 1, #order do
      local f = order[q]
      if vals[f] ~= stored[f] then
        set[#set + 1] = f
        set[#set + 1] = vals[f]
      end
    end
    if #set > 0 then redis.call('HSET', k, unpack(set)) end
  end
  i = b + 1
end
local top = tonumber(ARGV[4])
if top > 0 and top > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], ARGV[4])
end
return 1
