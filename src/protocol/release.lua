-- Releases one level of a holder's lock (see lock_give.lua for its keys, arguments and
-- answers).
return give_lock()
