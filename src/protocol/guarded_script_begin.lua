-- The start of a guarded script: the caller's body, from the end of this file to the `end`
-- the crate adds after it, is the function `guarded_body`. It sees KEYS and ARGV without the
-- two keys and two arguments the guard adds at their ends.
local function without_guard(list)
  local own = {}
  for i = 1, #list - 2 do
    own[i] = list[i]
  end
  return own
end
local function guarded_body()
  local KEYS, ARGV = without_guard(KEYS), without_guard(ARGV)
