-- The start of a script run once per request (request_end.lua runs it): its body, up to
-- request_end.lua, is the function `body`.
local function body()
