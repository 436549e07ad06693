//! The scripts of the reentrant lock (Redisson's layout: a hash of holder id -> reentrancy
//! count, whose TTL is the lease), with their arguments and the meaning of their replies.

use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::names::{LockKeys, FORCE_RELEASE_CHANNEL, RELEASE_MESSAGE};
use super::script::{lua_script, ScriptCall};

lua_script!(ACQUIRE = "acquire.lua");
lua_script!(RELEASE = "release.lua");
lua_script!(UNDO = "undo.lua");
lua_script!(FORCE_RELEASE = "force_release.lua");

/// Takes the lock for the chain `holder`, which holds `levels_held` levels already (0: a new
/// chain), with a lease of `lease_ms`.
pub(crate) fn acquire(
    keys: &LockKeys,
    holder: &str,
    levels_held: u32,
    lease_ms: u64,
) -> ScriptCall {
    ScriptCall::new(&ACQUIRE, &[&keys.name, &keys.token])
        .arg(lease_ms)
        .arg(holder)
        .arg(levels_held)
}

/// What an acquisition answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Taken (a new chain) or entered once more (a level of the chain), with this fencing
    /// token.
    Taken { token: u64 },
    /// Someone else holds it, for this long still when it has a lease.
    Held { ttl: Option<Duration> },
    /// The chain the acquisition meant to enter once more is gone.
    ChainGone,
}

impl FromRedisValue for Acquired {
    fn from_redis_value(value: Value) -> Result<Self, redis::ParsingError> {
        let (kind, value): (i64, i64) = FromRedisValue::from_redis_value(value)?;
        Ok(match kind {
            1 | 2 => Acquired::Taken {
                token: value.max(0) as u64,
            },
            3 => Acquired::ChainGone,
            _ => Acquired::Held {
                ttl: u64::try_from(value).ok().map(Duration::from_millis),
            },
        })
    }
}

/// Releases one level of the chain `holder`, which keeps `levels_left` levels; remaining
/// levels get at least `lease_ms`. The answer is kept `latch_ms` under `latch` for a retry.
pub(crate) fn release(
    keys: &LockKeys,
    latch: &str,
    holder: &str,
    lease_ms: u64,
    latch_ms: u64,
    levels_left: u32,
) -> ScriptCall {
    ScriptCall::new(&RELEASE, &[&keys.name, &keys.channel, latch])
        .arg(holder)
        .arg(lease_ms)
        .arg(latch_ms)
        .arg(RELEASE_MESSAGE)
        .arg(levels_left)
}

/// Whether a release found the chain holding the lock (`nil` from the script: it did not).
pub(crate) fn released(answer: &Value) -> bool {
    *answer != Value::Nil
}

/// Takes back what an acquisition by `holder` whose answer did not come may have added,
/// leaving the `levels_held` the chain had.
pub(crate) fn undo(keys: &LockKeys, holder: &str, levels_held: u32) -> ScriptCall {
    ScriptCall::new(&UNDO, &[&keys.name, &keys.channel])
        .arg(holder)
        .arg(levels_held)
        .arg(RELEASE_MESSAGE)
}

/// Frees the lock whoever holds it, telling each holder on the force-release channel.
/// Answers 1 when there was a lock to free.
pub(crate) fn force_release(keys: &LockKeys) -> ScriptCall {
    ScriptCall::new(&FORCE_RELEASE, &[&keys.name, &keys.channel, &keys.token])
        .arg(RELEASE_MESSAGE)
        .arg(FORCE_RELEASE_CHANNEL)
}
