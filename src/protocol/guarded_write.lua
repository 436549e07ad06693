-- The writes of a guarded write, after guarded_check.lua. Key i of the first #KEYS - 2 gets
-- the write ARGV[3i - 2] with the arguments ARGV[3i - 1] and ARGV[3i]:
--   'set',    value,  ttl in ms or ''
--   'del',    '',     ''
--   'hset',   field,  value
--   'incrby', amount, ''
-- Answers {1, the answer of each write in order}.
local answers = {1}
for i = 1, #KEYS - 2 do
  local write, first, second = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local key = KEYS[i]
  local answer
  if write == 'set' and second == '' then
    answer = redis.call('set', key, first)
  elseif write == 'set' then
    answer = redis.call('set', key, first, 'px', second)
  elseif write == 'del' then
    answer = redis.call('del', key)
  elseif write == 'hset' then
    answer = redis.call('hset', key, first, second)
  elseif write == 'incrby' then
    answer = redis.call('incrby', key, first)
  else
    return redis.error_reply('ERR unknown guarded write ' .. tostring(write))
  end
  answers[i + 1] = answer
end
return answers
