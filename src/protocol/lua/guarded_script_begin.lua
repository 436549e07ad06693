-- The start of a guarded script: the caller's body, from the end of this file to the `end`
-- the crate adds after it, is the function `guarded_body`. It sees KEYS and ARGV without the
-- two keys and three arguments the guard adds at their ends (guarded_check.lua).
local function without_last(list, count)
  local own = {}
  for i = 1, #list - count do
    own[i] = list[i]
  end
  return own
end
local function guarded_body()
  local KEYS, ARGV = without_last(KEYS, 2), without_last(ARGV, 3)
