-- The start of a guarded script: the caller's body, from the end of this line to the start
-- of guarded_script_end.lua, is the function `guarded_body`. It sees KEYS and ARGV without
-- the two keys and two arguments the guard adds at their ends.
local function guarded_body()
  local KEYS = {unpack(KEYS, 1, #KEYS - 2)}
  local ARGV = {unpack(ARGV, 1, #ARGV - 2)}
