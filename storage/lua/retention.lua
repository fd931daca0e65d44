local pre = ARGV[3]
local cutoff = tonumber(ARGV[4])
local nd, na, ne, nn = 0, 0, 0, 0
local function hex(s)
  local t = {}
  for i = 1, #s do t[i] = string.format('%02x', string.byte(s, i)) end
  return table.concat(t)
end
-- the exclusive lex bound just past every T at member of the delivery be64 id s
local function after(s)
  local b = {string.byte(s, 1, 8)}
  for i = 8, 1, -1 do
    if b[i] < 255 then
      b[i] = b[i] + 1
      for j = i + 1, 8 do b[j] = 0 end
      return '(' .. string.char(unpack(b))
    end
  end
  return '+'
end
local function inv(s)
  local t = {}
  for i = 1, #s do t[i] = string.char(255 - string.byte(s, i)) end
  return table.concat(t)
end
-- G: a T done member (the ids one batch ended) still scored before the cutoff goes, and the D
-- ops after it delete its ids; an id in T act was reopened by a resend since and stays.
local go = false
for i = 5, #ARGV, 4 do
  local op, a, b, c = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if op == 'G' then
    local sc = redis.call('ZSCORE', pre .. 'done', a)
    go = sc and tonumber(sc) < cutoff
    if go then redis.call('ZREM', pre .. 'done', a) end
  elseif op == 'D' then
    if go and not redis.call('ZSCORE', pre .. 'act', a) then
      nd = nd + redis.call('HDEL', pre .. 'dl', a)
      na = na + redis.call('ZREMRANGEBYLEX', pre .. 'at', '[' .. a, after(a))
      if b ~= '' then
        redis.call('ZREM', pre .. b, inv(a))
        redis.call('ZREM', pre .. c, inv(a))
      end
    end
  elseif op == 'E' then
    local ed = redis.call('HGET', pre .. 'ed', a)
    local live, kf = false, ''
    if ed then
      local h = 3 + string.byte(ed, 1) * 256 + string.byte(ed, 2)
      kf = string.sub(ed, 3, h - 1)
      for j = h, #ed, 8 do
        if redis.call('HEXISTS', pre .. 'dl', string.sub(ed, j, j + 7)) == 1 then
          live = true
          break
        end
      end
    end
    redis.call('ZREM', pre .. 'eo', a)
    if not live then
      ne = ne + redis.call('HDEL', pre .. 'ev', a)
      if kf ~= '' then
        local cur = redis.call('HGET', pre .. 'key', kf)
        if cur and string.sub(cur, 1, 8) == a then redis.call('HDEL', pre .. 'key', kf) end
      end
      redis.call('HDEL', pre .. 'ed', a)
    end
  elseif op == 'N' then
    redis.call('ZREM', pre .. 'nto', a)
    nn = nn + redis.call('ZREMRANGEBYLEX', pre .. 'nt:' .. hex(string.sub(a, 1, 8)), b, c)
  end
end
return {nd, na, ne, nn}
