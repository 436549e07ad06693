-- Redisson's own spin lock acquire script (Apache License 2.0), as the Java client sends it,
-- for tests/suite/spin.rs to hold the lock as a Java thread would.
-- Source: github.com/redisson/redisson  redisson/src/main/java/org/redisson/RedissonSpinLock.java
-- Read at master HEAD 66863978b4a92093b97c1f8c96f182a77e81d50e (2026-08-21, pom version 4.7.1-SNAPSHOT);
-- last commit touching this file: efe3ea7766640c9faef8c32c8b7ef4331ece9004 (2026-05-02).
-- Below, the Java string literals, one per line: joined, they give the Java string.
--
-- RedissonSpinLock.tryLockInnerAsync(leaseTime, unit, threadId, command)
--   commandExecutor.syncedEvalNoRetry(getRawName(), LongCodec.INSTANCE, command, <script>,
--       Collections.singletonList(getRawName()), internalLockLeaseTime, getLockName(threadId));
--
-- KEYS[1] = getRawName()                 -- lock hash name (the layout of RedissonLock)
-- ARGV[1] = internalLockLeaseTime        -- lease in ms
-- ARGV[2] = getLockName(threadId)        -- id + ":" + threadId  (id = ServiceManager UUID)
--
-- Returns nil when acquired (or re-entered), otherwise the lock's ttl (ms). The Java waiter
-- sleeps its back-off and sends it again; nothing is published on a release of its last
-- level (RedissonSpinLock.unlockInnerAsync deletes the hash and publishes nothing).
if (redis.call('exists', KEYS[1]) == 0) then 
redis.call('hincrby', KEYS[1], ARGV[2], 1); 
redis.call('pexpire', KEYS[1], ARGV[1]); 
return nil; 
end; 
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then 
redis.call('hincrby', KEYS[1], ARGV[2], 1); 
redis.call('pexpire', KEYS[1], ARGV[1]); 
return nil; 
end; 
return redis.call('pttl', KEYS[1]);
