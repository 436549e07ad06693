-- Takes the write lock of a read-write lock for a new chain, or enters it once more. An
-- upgrade (ARGV[6] set) is the write lock taken by the upgradable reader (the hash's
-- 'upgrader'), with the holder id of its upgradable chain: it enters once no other reader
-- with a live level is left, in the step that finds them gone, and no other writer can come
-- in between, as its read hold kept them out. It enters only while that hold lives.
-- KEYS[1]: the read-write lock hash (field 'mode' = 'read' | 'write'; readers' fields
--          '<holder id>' and the writer's '<holder id>:write' = reentrancy counts)
-- KEYS[2]: the fencing token counter of the lock name
-- ARGV[1]: the lease in milliseconds
-- ARGV[2]: the writer's field ('<holder id>:write')
-- ARGV[3]: how many levels of the chain the holder's process holds ('0': a new chain)
-- ARGV[4]: the writer's holder id
-- ARGV[5]: the prefix of the lock's derived keys ('{name}:'): reader r's level n has the
--          timeout key '<prefix><r>:rwlock_timeout:<n>'
-- ARGV[6]: for an upgrade, the id of this try ('' otherwise), kept in the field 'upgrading'
--          so that neither the undo of an earlier try nor the release of an earlier upgrade
--          can take a later one back
-- Answers as the lock's acquire script: {1, token}, {2, token}, {0, ms to wait at most} or
-- {3, 0}; an upgrade whose upgradable hold is gone answers {4, 0}.
local mode = redis.call('hget', KEYS[1], 'mode')
if ARGV[3] ~= '0' then
  if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return {3, 0}
  end
  return enter_again(ARGV[2], ARGV[1], KEYS[2], ARGV[3])
end
-- Whether the try id `a` was made after the try id `b`: ids are '<client id>:<number>',
-- numbered in the order their client makes them (compared as decimal strings: shorter is
-- smaller). Ids of different clients, or of another form, are not ordered: `a` counts as
-- later.
local function later_try(a, b)
  local a_client, a_number = string.match(a, '^(.*):(%d+)$')
  local b_client, b_number = string.match(b, '^(.*):(%d+)$')
  if not a_number or not b_number or a_client ~= b_client then
    return true
  end
  if #a_number ~= #b_number then
    return #a_number > #b_number
  end
  return a_number > b_number
end
-- Whether the upgradable hold of the chain ARGV[4] lives: the hash names it the upgrader,
-- and some level of it has not run out.
local function upgradable_lives()
  return redis.call('hget', KEYS[1], 'upgrader') == ARGV[4]
    and reader_level_left(ARGV[5], ARGV[4]) > 0
end
-- Grants the write lock to the upgrade try `try_id`, with one level and a fresh fencing
-- token; the field 'upgrading' names the try, which the undo of an earlier try and the
-- release of an earlier upgrade check. The lease the read levels keep is not shortened.
local function grant_upgrade(try_id)
  local taken = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1, 'upgrading', 'try:' .. try_id)
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return {1, taken}
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local upgrading = redis.call('hget', KEYS[1], 'upgrading')
  local holding_try = upgrading and string.match(upgrading, '^try:(.*)$')
  if ARGV[6] ~= '' and holding_try and not later_try(ARGV[6], holding_try) then
    -- A late copy of an earlier try (or a copy of the try that holds the grant): the grant
    -- stays with the try that holds it, whose answer the upgrade uses, and with the levels
    -- entered since; nothing is written, or the earlier try's undo, right behind it, would
    -- take it back.
    return {1, current_token(KEYS[2])}
  end
  if ARGV[6] ~= '' then
    if not upgradable_lives() then
      return {4, 0}
    end
    -- A later try takes the grant over (from an earlier try whose answer did not come, or
    -- from an upgrade released since whose release has not run yet): it answers for the
    -- grant now, and neither an earlier try's late undo nor that late release may take it.
    return grant_upgrade(ARGV[6])
  end
  return taken_before(ARGV[2], ARGV[1], KEYS[2])
end
if ARGV[6] == '' then
  if mode then
    return {0, redis.call('pttl', KEYS[1])}
  end
  local taken = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, taken}
end
if not upgradable_lives() then
  return {4, 0}
end
local others = longest_read_level(ARGV[5], ARGV[4])
if mode ~= 'read' or others > 0 then
  return {0, others > 0 and others or redis.call('pttl', KEYS[1])}
end
return grant_upgrade(ARGV[6])
