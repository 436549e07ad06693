-- Takes the lock for a new acquisition chain, or enters it once more for a chain that has it
-- (see lock_take.lua for its keys, arguments and answers).
return take_lock()
