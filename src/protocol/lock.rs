//! The scripts of the reentrant locks (Redisson's layout: a hash of holder id -> reentrancy
//! count, whose TTL is the lease), with their arguments and the meaning of their replies.
//!
//! Four kinds share the layout and the replies ([`LockKind`]): the lock; the fair lock, which
//! adds a queue of waiters and their places' expiries; and the read and write locks of a
//! read-write lock, whose hash also has a `mode` field, the writer's field `<holder>:write`,
//! and a timeout key per read level. Each function here picks the kind's script from the
//! keys.

use crate::layout;
use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::names::{LockKeys, LockKind, RELEASE_MESSAGE, WAKE_ALL_MESSAGE};
use super::request::Window;
use super::script::{lua_script, ScriptCall};
use super::Request;

lua_script!(ACQUIRE = "try_deadline.lua" + "acquire_levels.lua" + "lock_take.lua" + "acquire.lua");
lua_script!(RELEASE = "release_levels.lua" + "lock_give.lua" + "release.lua");
lua_script!(UNDO = "try_undo_begin.lua" + "undo.lua" + "try_undo_end.lua");
lua_script!(FORCE_RELEASE = "request_begin.lua" + "force_release.lua" + "request_end.lua");
lua_script!(
    FAIR_ACQUIRE =
        "try_deadline.lua" + "fair_queue.lua" + "acquire_levels.lua" + "fair_acquire.lua"
);
lua_script!(FAIR_RELEASE = "fair_queue.lua" + "release_levels.lua" + "fair_release.lua");
lua_script!(FAIR_UNDO = "try_undo_begin.lua" + "fair_undo.lua" + "try_undo_end.lua");
lua_script!(
    FAIR_FORCE_RELEASE = "request_begin.lua" + "fair_force_release.lua" + "request_end.lua"
);
lua_script!(
    READ_ACQUIRE =
        "try_deadline.lua" + "acquire_levels.lua" + "read_levels.lua" + "read_acquire.lua"
);
lua_script!(
    UPGRADABLE_ACQUIRE = "try_deadline.lua"
        + "acquire_levels.lua"
        + "read_levels.lua"
        + "rwlock_longest_read.lua"
        + "upgradable_acquire.lua"
);
lua_script!(READ_RELEASE = "release_levels.lua" + "rwlock_longest_read.lua" + "read_release.lua");
lua_script!(
    WRITE_ACQUIRE =
        "try_deadline.lua" + "acquire_levels.lua" + "rwlock_longest_read.lua" + "write_acquire.lua"
);
lua_script!(WRITE_RELEASE = "release_levels.lua" + "rwlock_longest_read.lua" + "write_release.lua");
lua_script!(RWLOCK_UNDO = "try_undo_begin.lua" + "rwlock_undo.lua" + "try_undo_end.lua");
lua_script!(REQUEST_REVOCATION = "call_deadline.lua" + "revoke.lua");
lua_script!(
    RWLOCK_FORCE_RELEASE = "request_begin.lua" + "rwlock_force_release.lua" + "request_end.lua"
);

/// Takes the lock for the chain `holder`, which holds `levels_held` levels already (0: a new
/// chain), with a lease of `lease_ms`; for a write lock taken by the upgradable reader, an
/// upgrade, with the id of this try. A fair-lock waiter that `accepts_grant` may be handed
/// the lock by a release while it waits (see [`grant_of`]). The try is refused
/// ([`Acquired::Late`]) when it reaches the server after `deadline_ms` (ms since the epoch,
/// on the server's clock).
pub(crate) fn acquire(
    keys: &LockKeys,
    holder: &str,
    levels_held: u32,
    lease_ms: u64,
    upgrade: Option<&str>,
    accepts_grant: bool,
    deadline_ms: u64,
) -> ScriptCall {
    let call = match keys.kind {
        LockKind::Plain | LockKind::Leader => ScriptCall::new(&ACQUIRE, &[&keys.name, &keys.token])
            .arg(lease_ms)
            .arg(holder)
            .arg(levels_held),
        LockKind::Fair { place_ms } => ScriptCall::new(
            &FAIR_ACQUIRE,
            &[
                &keys.name,
                &keys.queue,
                &keys.queue_timeouts,
                &keys.token,
                &keys.grants,
            ],
        )
        .arg(lease_ms)
        .arg(holder)
        .arg(levels_held)
        .arg(place_ms)
        .arg(u8::from(accepts_grant)),
        LockKind::Read => ScriptCall::new(&READ_ACQUIRE, &[&keys.name, &keys.token])
            .arg(lease_ms)
            .arg(holder)
            .arg(levels_held)
            .arg(layout::read_level_prefix(&keys.name, holder)),
        LockKind::Upgradable => ScriptCall::new(&UPGRADABLE_ACQUIRE, &[&keys.name, &keys.token])
            .arg(lease_ms)
            .arg(holder)
            .arg(levels_held)
            .arg(layout::read_level_prefix(&keys.name, holder))
            .arg(layout::suffixed(&keys.name, "")),
        LockKind::Write => ScriptCall::new(&WRITE_ACQUIRE, &[&keys.name, &keys.token])
            .arg(lease_ms)
            .arg(layout::writer_field(holder))
            .arg(levels_held)
            .arg(holder)
            .arg(layout::suffixed(&keys.name, ""))
            .arg(upgrade.unwrap_or_default()),
    };
    call.arg(deadline_ms)
}

/// What an acquisition answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Taken (a new chain) or entered once more (a level of the chain), with this fencing
    /// token.
    Taken { token: u64 },
    /// Someone else holds it, for this long still when it has a lease; for a fair lock's
    /// waiter, with the fencing token counter then: a grant made later has a larger token.
    Held {
        ttl: Option<Duration>,
        counter: Option<u64>,
    },
    /// The chain the acquisition meant to enter once more is gone.
    ChainGone,
    /// An upgrade found the upgradable hold it upgrades gone.
    UpgradableGone,
    /// The try reached the server after its deadline, and changed nothing; the server's time
    /// then (ms since the epoch).
    Late { server_ms: u64 },
}

impl FromRedisValue for Acquired {
    fn from_redis_value(value: Value) -> Result<Self, redis::ParsingError> {
        let answer: Vec<i64> = FromRedisValue::from_redis_value(value)?;
        let (kind, value) = match answer.as_slice() {
            [kind, value, ..] => (*kind, *value),
            _ => return Err(format!("an acquisition answered {answer:?}").into()),
        };
        Ok(match kind {
            1 | 2 => Acquired::Taken {
                token: value.max(0) as u64,
            },
            3 => Acquired::ChainGone,
            4 => Acquired::UpgradableGone,
            5 => Acquired::Late {
                server_ms: value.max(0) as u64,
            },
            _ => Acquired::Held {
                ttl: u64::try_from(value).ok().map(Duration::from_millis),
                counter: answer
                    .get(2)
                    .and_then(|counter| u64::try_from(*counter).ok()),
            },
        })
    }
}

/// What a plain lock's release of its last level does for a chain of the releasing process
/// that waits for the lock.
#[derive(Clone, Copy)]
pub(crate) enum Handing<'a> {
    /// Nothing: frees the lock.
    No,
    /// Hands it the lock: its holder id, and the lease it asked for in ms.
    To { holder: &'a str, lease_ms: u64 },
}

impl Handing<'_> {
    /// The script's arguments: the field of the chain to hand the lock to ('' for none),
    /// made by `field` from its holder id, and its lease.
    fn args(self, field: impl Fn(&str) -> String) -> (String, u64) {
        match self {
            Handing::No => (String::new(), 0),
            Handing::To { holder, lease_ms } => (field(holder), lease_ms),
        }
    }
}

/// Releases one level of the chain `holder`, which keeps `levels_left` levels; remaining
/// levels get at least `lease_ms`. The answer is kept as `window` says under `receipt` for a
/// retry; a copy that comes after the window's deadline is refused (`REDLEASE_LATE`). A plain
/// lock's last level is handed on as `handing` says (see [`handed`]).
pub(crate) fn release(
    keys: &LockKeys,
    receipt: &str,
    holder: &str,
    lease_ms: u64,
    window: Window,
    levels_left: u32,
    handing: Handing<'_>,
) -> ScriptCall {
    let receipt_until = window.keep_until_ms();
    let call = match keys.kind {
        LockKind::Leader if keys.election.is_some() => {
            let election = keys.election.as_ref().expect("an election's keys");
            let release = (holder, lease_ms, receipt_until, levels_left);
            super::election::resign(keys, election, receipt, release)
        }
        LockKind::Plain | LockKind::Leader => {
            let (to, to_lease_ms) = handing.args(str::to_owned);
            let script_keys = [&keys.name, &keys.channel, receipt, &keys.token];
            ScriptCall::new(&RELEASE, &script_keys)
                .arg(holder)
                .arg(lease_ms)
                .arg(receipt_until)
                .arg(RELEASE_MESSAGE)
                .arg(levels_left)
                .arg(to)
                .arg(to_lease_ms)
        }
        LockKind::Fair { place_ms } => ScriptCall::new(
            &FAIR_RELEASE,
            &[
                &keys.name,
                &keys.queue,
                &keys.queue_timeouts,
                receipt,
                &keys.grants,
                &keys.token,
            ],
        )
        .arg(holder)
        .arg(lease_ms)
        .arg(receipt_until)
        .arg(RELEASE_MESSAGE)
        .arg(levels_left)
        .arg(&keys.channel)
        .arg(place_ms),
        LockKind::Read | LockKind::Upgradable => {
            ScriptCall::new(&READ_RELEASE, &[&keys.name, &keys.channel, receipt])
                .arg(holder)
                .arg(lease_ms)
                .arg(receipt_until)
                .arg(RELEASE_MESSAGE)
                .arg(levels_left)
                .arg(layout::suffixed(&keys.name, ""))
                .arg(WAKE_ALL_MESSAGE)
        }
        LockKind::Write => {
            let (to, to_lease_ms) = handing.args(layout::writer_field);
            let script_keys = [&keys.name, &keys.channel, receipt, &keys.token];
            ScriptCall::new(&WRITE_RELEASE, &script_keys)
                .arg(layout::writer_field(holder))
                .arg(lease_ms)
                .arg(receipt_until)
                .arg(WAKE_ALL_MESSAGE)
                .arg(levels_left)
                .arg(layout::suffixed(&keys.name, ""))
                .arg(to)
                .arg(to_lease_ms)
        }
    };
    call.arg(window.deadline_ms())
}

/// Whether a release found the chain holding the lock (`nil` from the script: it did not).
pub(crate) fn released(answer: &Value) -> bool {
    *answer != Value::Nil
}

/// A fair lock's grant to the waiter `holder`, from a message on its channel: the fencing
/// token and the lease the release gave it (`grant <token> <lease ms> <holder id>`).
pub(crate) fn grant_of(message: &[u8], holder: &str) -> Option<(u64, u64)> {
    let message = std::str::from_utf8(message).ok()?;
    let mut words = message.split(' ');
    if words.next()? != "grant" {
        return None;
    }
    let token = words.next()?.parse().ok()?;
    let lease_ms = words.next()?.parse().ok()?;
    (words.next()? == holder && words.next().is_none()).then_some((token, lease_ms))
}

/// The fencing token of the hold a release handed on (`{2, token}` from the script), if it
/// did.
pub(crate) fn handed(answer: &Value) -> Option<u64> {
    match answer {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(2), Value::Int(token)] => u64::try_from(*token).ok(),
            _ => None,
        },
        _ => None,
    }
}

/// Takes back what an acquisition by `holder` whose answer did not come may have added,
/// leaving the `levels_held` the chain had.
///
/// For a fair lock it also takes the holder's place in the queue back: the same call serves a
/// waiter that gives up. The undo of an upgrade's try takes back only that try's grant.
/// Until `not_before` (the deadline of the try it undoes, ms since the epoch on the server's
/// clock; 0: none) a copy of the try may still come: the undo answers
/// [`undo_again`](super::request::undo_again) then.
pub(crate) fn undo(
    keys: &LockKeys,
    holder: &str,
    levels_held: u32,
    upgrade: Option<&str>,
    not_before: u64,
) -> ScriptCall {
    let call = match keys.kind {
        LockKind::Plain | LockKind::Leader => ScriptCall::new(&UNDO, &[&keys.name, &keys.channel])
            .arg(holder)
            .arg(levels_held)
            .arg(RELEASE_MESSAGE),
        LockKind::Fair { place_ms } => {
            let keys_of_undo: [&str; 4] =
                [&keys.name, &keys.queue, &keys.queue_timeouts, &keys.grants];
            ScriptCall::new(&FAIR_UNDO, &keys_of_undo)
                .arg(holder)
                .arg(levels_held)
                .arg(RELEASE_MESSAGE)
                .arg(&keys.channel)
                .arg(place_ms)
        }
        LockKind::Read | LockKind::Upgradable => {
            ScriptCall::new(&RWLOCK_UNDO, &[&keys.name, &keys.channel])
                .arg(holder)
                .arg(levels_held)
                .arg(layout::read_level_prefix(&keys.name, holder))
                .arg(WAKE_ALL_MESSAGE)
                .arg("")
        }
        LockKind::Write => ScriptCall::new(&RWLOCK_UNDO, &[&keys.name, &keys.channel])
            .arg(layout::writer_field(holder))
            .arg(levels_held)
            .arg("")
            .arg(WAKE_ALL_MESSAGE)
            .arg(upgrade.unwrap_or_default()),
    };
    call.arg(not_before)
}

/// Frees the lock whoever holds it, telling each holder on the force-release channel.
/// Answers 1 when there was a lock to free. The read and write locks of a read-write lock
/// free it whole: readers and writer.
pub(crate) fn force_release(keys: &LockKeys, request: &Request) -> ScriptCall {
    let call = match keys.kind {
        LockKind::Plain | LockKind::Leader => ScriptCall::new(
            &FORCE_RELEASE,
            &[&keys.name, &keys.channel, &keys.token, request.key()],
        )
        .arg(RELEASE_MESSAGE)
        .arg(layout::FORCE_RELEASE_CHANNEL),
        LockKind::Fair { .. } => ScriptCall::new(
            &FAIR_FORCE_RELEASE,
            &[&keys.name, &keys.queue, &keys.token, request.key()],
        )
        .arg(RELEASE_MESSAGE)
        .arg(layout::FORCE_RELEASE_CHANNEL)
        .arg(&keys.channel),
        LockKind::Read | LockKind::Write | LockKind::Upgradable => ScriptCall::new(
            &RWLOCK_FORCE_RELEASE,
            &[&keys.name, &keys.channel, &keys.token, request.key()],
        )
        .arg(WAKE_ALL_MESSAGE)
        .arg(layout::FORCE_RELEASE_CHANNEL),
    };
    call.request_args(request)
}

/// Asks the holders that keep an acquisition of this kind out to let go, on the notice
/// channel: a reader's, the writer; an upgradable reader's, the writer and the upgradable
/// reader; any other's, every holder; never `except` (an upgrade's own upgradable read).
/// Answers how many holds were asked.
pub(crate) fn request_revocation(
    keys: &LockKeys,
    except: Option<&str>,
    deadline_ms: u64,
) -> ScriptCall {
    let whom = match keys.kind {
        LockKind::Read => "writer",
        LockKind::Upgradable => "upgrade",
        _ => "all",
    };
    ScriptCall::new(&REQUEST_REVOCATION, &[&keys.name])
        .arg(layout::FORCE_RELEASE_CHANNEL)
        .arg(whom)
        .arg(except.unwrap_or_default())
        .arg(deadline_ms)
}

/// The hash field that counts `holder`'s levels in a lock of this kind.
pub(crate) fn holder_field(keys: &LockKeys, holder: &str) -> String {
    match keys.kind {
        LockKind::Write => layout::writer_field(holder),
        _ => holder.to_owned(),
    }
}
