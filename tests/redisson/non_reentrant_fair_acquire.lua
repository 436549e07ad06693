-- Redisson's own non-reentrant fair-lock acquire script (Apache License 2.0), as the Java
-- client sends it for lock() and tryLock(wait), for tests/suite/non_reentrant.rs to queue and
-- hold the lock as a Java thread would.
-- Source: github.com/redisson/redisson  redisson/src/main/java/org/redisson/RedissonNonReentrantFairLock.java
-- Read at master HEAD 66863978b4a92093b97c1f8c96f182a77e81d50e (2026-08-21, pom version 4.7.1-SNAPSHOT);
-- last commit touching this file: 52d54afbd62f93be7fd60e0fa2728e70fff3a09f (2026-04-30).
-- Below, the Java string literals, one per line: joined, they give the Java string.
--
-- RedissonNonReentrantFairLock.tryLockInnerAsync(..., command == RedisCommands.EVAL_LONG)
--   evalWriteSyncedNoRetryAsync(getRawName(), LongCodec.INSTANCE, command, <script>,
--       Arrays.asList(getRawName(), threadsQueueName, timeoutSetName),
--       unit.toMillis(leaseTime), getLockName(threadId), wait, currentTime, REENTRY_ERR);
--
-- KEYS[1] = getRawName()                 -- lock hash name (the layout of RedissonFairLock)
-- KEYS[2] = threadsQueueName             -- "redisson_lock_queue:{<name>}"
-- KEYS[3] = timeoutSetName               -- "redisson_lock_timeout:{<name>}"
-- ARGV[1] = unit.toMillis(leaseTime)     -- lease in ms
-- ARGV[2] = getLockName(threadId)        -- id + ":" + threadId
-- ARGV[3] = wait                         -- the place's wait (threadWaitTime, 5 min by default)
-- ARGV[4] = currentTime                  -- System.currentTimeMillis()
-- ARGV[5] = REENTRY_ERR                  -- "NON_REENTRANT_REACQUIRE"
--
-- Returns nil when acquired, an error reply ARGV[5] when the thread holds it already,
-- otherwise a ttl (ms), its place in the queue kept.
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
if (redis.call('exists', KEYS[1]) == 0) 
and ((redis.call('exists', KEYS[2]) == 0) 
or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then 
redis.call('lpop', KEYS[2]);
redis.call('zrem', KEYS[3], ARGV[2]);
local keys = redis.call('zrange', KEYS[3], 0, -1);
for i = 1, #keys, 1 do 
redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);
end;
redis.call('hset', KEYS[1], ARGV[2], 1);
redis.call('pexpire', KEYS[1], ARGV[1]);
return nil;
end;
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then 
return redis.error_reply(ARGV[5]);
end;
local timeout = redis.call('zscore', KEYS[3], ARGV[2]);
if timeout ~= false then 
local ttl = redis.call('pttl', KEYS[1]);
return math.max(0, ttl); 
end;
local lastThreadId = redis.call('lindex', KEYS[2], -1);
local ttl;
if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then 
ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);
else 
ttl = redis.call('pttl', KEYS[1]);
end;
local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);
if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then 
redis.call('rpush', KEYS[2], ARGV[2]);
end;
return ttl;
