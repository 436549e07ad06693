-- The number of permits a semaphore has available.
-- KEYS[1]: the semaphore
-- Answers the count (0 for an absent key; below zero when a client took more than there were).
return read_count(KEYS[1]) or 0
