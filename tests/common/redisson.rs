//! Redisson's own scripts (in `tests/redisson/`), run as a Java client's thread would run
//! them, for the tests of interplay with Redisson on a name.

/// Redisson's fair-lock acquisition on the lock `name` for the Java thread `holder`, with a
/// 30 s lease and Redisson's default 5 min wait: `None` when taken, else the lock's TTL
/// (its place in the queue kept).
pub fn fair_acquire(connection: &mut redis::Connection, name: &str, holder: &str) -> Option<i64> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    redis::Script::new(include_str!("../redisson/fair_acquire.lua"))
        .key(name)
        .key(format!("redisson_lock_queue:{{{name}}}"))
        .key(format!("redisson_lock_timeout:{{{name}}}"))
        .arg(30_000)
        .arg(holder)
        .arg(300_000)
        .arg(now)
        .invoke(connection)
        .unwrap()
}

/// Redisson's non-reentrant fair-lock acquisition (`lock()`, `tryLock(wait)`) on the lock
/// `name` for the Java thread `holder`, as [`fair_acquire`]: `Ok(None)` when taken, else the
/// lock's TTL (its place in the queue kept); Redisson's error reply when `holder` holds it.
pub fn non_reentrant_fair_acquire(
    connection: &mut redis::Connection,
    name: &str,
    holder: &str,
) -> redis::RedisResult<Option<i64>> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    redis::Script::new(include_str!("../redisson/non_reentrant_fair_acquire.lua"))
        .key(name)
        .key(format!("redisson_lock_queue:{{{name}}}"))
        .key(format!("redisson_lock_timeout:{{{name}}}"))
        .arg(30_000)
        .arg(holder)
        .arg(300_000)
        .arg(now)
        .arg("NON_REENTRANT_REACQUIRE")
        .invoke(connection)
}
