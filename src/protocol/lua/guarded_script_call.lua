-- The end of a guarded script's body (after request_begin.lua and guarded_check.lua): runs
-- the caller's body, and answers {1, what it answered}. A body that fails answers
-- {-1, 0, the error}, kept for a repeat of the request like any answer, so that a repeat
-- does not run the body (and its writes before the failure) again.
local ran, answer = pcall(guarded_body)
if not ran then
  if type(answer) == 'table' and answer.err then
    answer = answer.err
  end
  return {-1, 0, tostring(answer)}
end
return {1, answer}
