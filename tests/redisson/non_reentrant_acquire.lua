-- Redisson's own non-reentrant lock acquire script (Apache License 2.0), as the Java client
-- sends it, for tests/suite/non_reentrant.rs to hold the lock as a Java thread would.
-- Source: github.com/redisson/redisson  redisson/src/main/java/org/redisson/RedissonNonReentrantLock.java
-- Read at master HEAD 66863978b4a92093b97c1f8c96f182a77e81d50e (2026-08-21, pom version 4.7.1-SNAPSHOT);
-- last commit touching this file: 52d54afbd62f93be7fd60e0fa2728e70fff3a09f (2026-04-30).
-- Below, the Java string literals, one per line: joined, they give the Java string.
--
-- RedissonNonReentrantLock.tryLockInnerAsync(waitTime, leaseTime, unit, threadId, command)
--   evalWriteSyncedNoRetryAsync(getRawName(), LongCodec.INSTANCE, command, <script>,
--       Collections.singletonList(getRawName()),
--       unit.toMillis(leaseTime), getLockName(threadId), REENTRY_ERR);
--
-- KEYS[1] = getRawName()                 -- lock hash name (the layout of RedissonLock)
-- ARGV[1] = unit.toMillis(leaseTime)     -- lease in ms
-- ARGV[2] = getLockName(threadId)        -- id + ":" + threadId  (id = ServiceManager UUID)
-- ARGV[3] = REENTRY_ERR                  -- "NON_REENTRANT_REACQUIRE"
--
-- Returns nil when acquired, an error reply ARGV[3] when the thread holds it already,
-- otherwise the lock's ttl (ms).
if redis.call('exists', KEYS[1]) == 0 then 
redis.call('hincrby', KEYS[1], ARGV[2], 1); 
redis.call('pexpire', KEYS[1], ARGV[1]); 
return nil; 
end; 
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then 
return redis.error_reply(ARGV[3]); 
end; 
return redis.call('pttl', KEYS[1]);
