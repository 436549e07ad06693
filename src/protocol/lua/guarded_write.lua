-- The writes of a guarded write, after guarded_check.lua. Key i of the first #KEYS - 2 gets
-- the write ARGV[3i - 2] with the arguments ARGV[3i - 1] and ARGV[3i]:
--   'set',    value,  ttl in ms or ''
--   'del',    '',     ''
--   'hset',   field,  value
--   'incrby', amount, ''
-- Answers {1, the answer of each write in order}. A write Redis refuses (a key of another
-- type, a value that is not an integer) ends the script with {-1, how many writes were
-- applied before it, the refusal}: Redis keeps those writes, and the answer is kept for a
-- repeat of the request, which then applies nothing again.
local answers = {1}
for i = 1, #KEYS - 2 do
  local write, first, second = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local key = KEYS[i]
  local answer
  if write == 'set' and second == '' then
    answer = redis.pcall('set', key, first)
  elseif write == 'set' then
    answer = redis.pcall('set', key, first, 'px', second)
  elseif write == 'del' then
    answer = redis.pcall('del', key)
  elseif write == 'hset' then
    answer = redis.pcall('hset', key, first, second)
  elseif write == 'incrby' then
    answer = redis.pcall('incrby', key, first)
  else
    answer = {err = 'ERR unknown guarded write ' .. tostring(write)}
  end
  if type(answer) == 'table' and answer.err then
    return {-1, i - 1, answer.err}
  end
  answers[i + 1] = answer
end
return answers
