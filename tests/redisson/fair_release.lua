-- Redisson's own fair-lock release script (Apache License 2.0), as the Java client sends it, for
-- tests/suite/handoff.rs to queue a Redisson waiter among redlease's.
-- Source: github.com/redisson/redisson  redisson/src/main/java/org/redisson/RedissonFairLock.java
-- Read at master HEAD 66863978b4a92093b97c1f8c96f182a77e81d50e (2026-08-21, pom version 4.7.1-SNAPSHOT);
-- last commit touching this file: a5077398eb8707222deab0b3d54941c90801d801 (2026-06-25).
-- Below, the Java string literals, one per line: joined, they give the Java string.
--
-- RedissonFairLock.unlockInnerAsync(long threadId, String requestId, long timeout)
--   evalWriteSyncedNoRetryAsync(getRawName(), LongCodec.INSTANCE, RedisCommands.EVAL_BOOLEAN, <script>,
--       Arrays.asList(getRawName(), threadsQueueName, timeoutSetName, getChannelName(), getUnlockLatchName(requestId)),
--       LockPubSub.UNLOCK_MESSAGE, internalLockLeaseTime, getLockName(threadId),
--       System.currentTimeMillis(), getSubscribeService().getPublishCommand(), timeout);
--
-- KEYS[1] = getRawName()
-- KEYS[2] = threadsQueueName                  -- "redisson_lock_queue:{<name>}"
-- KEYS[3] = timeoutSetName                    -- "redisson_lock_timeout:{<name>}"
-- KEYS[4] = getChannelName()                  -- prefixName("redisson_lock__channel", getRawName()) -> "redisson_lock__channel:{<name>}"
-- KEYS[5] = getUnlockLatchName(requestId)     -- prefixName("redisson_unlock_latch", getRawName()) + ":" + requestId
--                                             -- -> "redisson_unlock_latch:{<name>}:<requestId>"
-- ARGV[1] = LockPubSub.UNLOCK_MESSAGE         -- 0L
-- ARGV[2] = internalLockLeaseTime             -- ms
-- ARGV[3] = getLockName(threadId)             -- id + ":" + threadId
-- ARGV[4] = System.currentTimeMillis()
-- ARGV[5] = getSubscribeService().getPublishCommand()  -- "SPUBLISH" if sharding supported, else "PUBLISH"
-- ARGV[6] = timeout                           -- computed in RedissonBaseLock.unlockInnerAsync(threadId, requestId):
--                                             -- max(1, (cfg.timeout + retryDelay.calcDelay(retryAttempts)) * retryAttempts), Long.MAX_VALUE on overflow
--
-- Wake-up publish goes to KEYS[4] .. ':' .. nextThreadId, i.e. "redisson_lock__channel:{<name>}:<id>:<threadId>",
-- matching RedissonFairLock.subscribe(): getChannelName() + ":" + getLockName(threadId).
-- Returns 1 (unlocked), 0 (still held, counter decremented), nil (not held by this thread), or the cached latch value.
local val = redis.call('get', KEYS[5]); 
if val ~= false then 
return tonumber(val);
end; 
while true do 
local firstThreadId2 = redis.call('lindex', KEYS[2], 0);
if firstThreadId2 == false then 
break;
end; 
local timeout = redis.call('zscore', KEYS[3], firstThreadId2);
if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then 
redis.call('zrem', KEYS[3], firstThreadId2); 
redis.call('lpop', KEYS[2]); 
else 
break;
end; 
end;
if (redis.call('exists', KEYS[1]) == 0) then 
local nextThreadId = redis.call('lindex', KEYS[2], 0); 
if nextThreadId ~= false then 
redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); 
end; 
redis.call('set', KEYS[5], 1, 'px', ARGV[6]); 
return 1; 
end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then 
return nil;
end; 
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); 
if (counter > 0) then 
redis.call('pexpire', KEYS[1], ARGV[2]); 
redis.call('set', KEYS[5], 0, 'px', ARGV[6]); 
return 0; 
end; 
redis.call('del', KEYS[1]); 
redis.call('set', KEYS[5], 1, 'px', ARGV[6]); 
local nextThreadId = redis.call('lindex', KEYS[2], 0); 
if nextThreadId ~= false then 
redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); 
end; 
return 1; 
