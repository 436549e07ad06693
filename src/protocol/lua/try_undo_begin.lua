-- The start of an undo of an acquisition try (try_undo_end.lua runs it): its body, up to
-- try_undo_end.lua, is the function `undo_body`.
local function undo_body()
