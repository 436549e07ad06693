-- Redisson's own fair-lock acquire script (Apache License 2.0), as the Java client sends it, for
-- tests/suite/handoff.rs to queue a Redisson waiter among redlease's.
-- Source: github.com/redisson/redisson  redisson/src/main/java/org/redisson/RedissonFairLock.java
-- Read at master HEAD 66863978b4a92093b97c1f8c96f182a77e81d50e (2026-08-21, pom version 4.7.1-SNAPSHOT);
-- last commit touching this file: a5077398eb8707222deab0b3d54941c90801d801 (2026-06-25).
-- Below, the Java string literals, one per line: joined, they give the Java string.
--
-- RedissonFairLock.tryLockInnerAsync(waitTime, leaseTime, unit, threadId, RedisCommands.EVAL_LONG)
--   commandExecutor.syncedEvalNoRetry(getRawName(), LongCodec.INSTANCE, command, <script>,
--       Arrays.asList(getRawName(), threadsQueueName, timeoutSetName),
--       unit.toMillis(leaseTime), getLockName(threadId), wait, currentTime);
--
-- KEYS[1] = getRawName()                 -- lock hash name
-- KEYS[2] = threadsQueueName             -- prefixName("redisson_lock_queue", getRawName())   -> "redisson_lock_queue:{<name>}"
-- KEYS[3] = timeoutSetName               -- prefixName("redisson_lock_timeout", getRawName()) -> "redisson_lock_timeout:{<name>}"
-- ARGV[1] = unit.toMillis(leaseTime)     -- lease in ms (internalLockLeaseTime, i.e. lockWatchdogTimeout, when leaseTime <= 0)
-- ARGV[2] = getLockName(threadId)        -- id + ":" + threadId  (id = ServiceManager UUID)
-- ARGV[3] = wait                         -- long wait = threadWaitTime; if (waitTime > 0) wait = unit.toMillis(waitTime);
--                                        -- threadWaitTime = cfg.getFairLockWaitTimeout() (default 5 * 60000 ms)
-- ARGV[4] = currentTime                  -- long currentTime = System.currentTimeMillis();  (computed before the eval)
--
-- Returns nil when acquired/re-entered, otherwise a ttl (ms).
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
redis.call('hincrby', KEYS[1], ARGV[2],1);
redis.call('pexpire', KEYS[1], ARGV[1]);
return nil;
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
