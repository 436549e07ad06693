//! Redisson's own scripts (in `tests/redisson/`), run as a Java client's thread would run
//! them, for the tests of interplay with Redisson on a name.

/// A fair-lock acquisition script of Redisson's on the lock `name` for the Java thread
/// `holder`, with the arguments both fair scripts start with: its keys (the hash, the queue,
/// the places' expiries), a 30 s lease, Redisson's default 5 min wait, and the time now.
fn fair_invocation<'a>(
    script: &'a redis::Script,
    name: &str,
    holder: &str,
) -> redis::ScriptInvocation<'a> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut invocation = script.key(name);
    invocation
        .key(format!("redisson_lock_queue:{{{name}}}"))
        .key(format!("redisson_lock_timeout:{{{name}}}"))
        .arg(30_000)
        .arg(holder)
        .arg(300_000)
        .arg(now);
    invocation
}

/// Redisson's fair-lock acquisition on the lock `name` for the Java thread `holder`: `None`
/// when taken, else the lock's TTL (its place in the queue kept).
pub fn fair_acquire(connection: &mut redis::Connection, name: &str, holder: &str) -> Option<i64> {
    let script = redis::Script::new(include_str!("../redisson/fair_acquire.lua"));
    fair_invocation(&script, name, holder)
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
    let script = redis::Script::new(include_str!("../redisson/non_reentrant_fair_acquire.lua"));
    fair_invocation(&script, name, holder)
        .arg("NON_REENTRANT_REACQUIRE")
        .invoke(connection)
}
