//! The scripts of the reentrant locks (Redisson's layout: a hash of holder id -> reentrancy
//! count, whose TTL is the lease), with their arguments and the meaning of their replies.
//!
//! The kinds share the layout and the replies, and differ in their scripts: each kind is a
//! type of its own with its keys, whose [`LockScripts`] assemble its calls, in a file of its
//! own: the lock ([`plain`]); the fair lock, which adds a queue of waiters and their places'
//! expiries ([`fair`]); and the read, write and upgradable locks of a read-write lock, whose
//! hash also has a `mode` field, the writer's field `<holder>:write`, and a timeout key per
//! read level ([`rwlock`]). The election's lock is a plain lock with a record of its own
//! (`super::election`). The functions here add what every kind's call carries (a deadline, a
//! request), and read the replies every kind shares.

pub(crate) mod fair;
pub(crate) mod plain;
pub(crate) mod rwlock;

use std::borrow::Cow;
use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::names::LockKeys;
use super::request::Window;
use super::script::{lua_script, ScriptCall};
use super::Request;
use crate::layout;

lua_script!(REQUEST_REVOCATION = "call_deadline.lua" + "revoke.lua");

/// The scripts of one kind of lock, over its keys: what the kind's type implements (see
/// the lock's `LockKind`, which adds the kind's rules in this process). Each builds the
/// kind's part of a call; the functions of this module add what every call carries.
pub(crate) trait LockScripts: Send + Sync {
    /// The keys every kind has: the lock's hash, its channel, its token counter.
    fn keys(&self) -> &LockKeys;

    /// The call that takes the lock (see [`acquire`]).
    fn acquire_call(&self, this_try: &TryArgs<'_>) -> ScriptCall;

    /// The call that releases a level (see [`release`]).
    fn release_call(&self, release: &ReleaseArgs<'_>) -> ScriptCall;

    /// The call that takes back what a try may have added (see [`undo`]).
    fn undo_call(&self, undo: &UndoArgs<'_>) -> ScriptCall;

    /// The call that frees the lock whoever holds it (see [`force_release`]).
    fn force_release_call(&self, request: &Request) -> ScriptCall;

    /// Which holders keep an acquisition of this kind out, for a revocation request: `all`
    /// (the default), `writer` (a reader's), or `upgrade` (an upgradable reader's: the writer
    /// and the upgradable reader).
    fn revocation_targets(&self) -> &'static str {
        "all"
    }

    /// The hash field that counts `holder`'s levels (the holder id, or a writer's field).
    fn hold_field<'a>(&self, holder: &'a str) -> Cow<'a, str> {
        Cow::Borrowed(holder)
    }
}

/// A kind laid out in Redis as another kind is (a non-reentrant lock as its reentrant kind, a
/// spin lock as the lock): its scripts are the other kind's, so the two exclude each other on
/// a name.
pub(crate) trait LaidOutAs: Send + Sync {
    /// The kind whose scripts this one sends.
    type Layout: LockScripts;

    /// That kind, over this one's name.
    fn layout(&self) -> &Self::Layout;
}

impl<K: LaidOutAs> LockScripts for K {
    fn keys(&self) -> &LockKeys {
        self.layout().keys()
    }

    fn acquire_call(&self, this_try: &TryArgs<'_>) -> ScriptCall {
        self.layout().acquire_call(this_try)
    }

    fn release_call(&self, release: &ReleaseArgs<'_>) -> ScriptCall {
        self.layout().release_call(release)
    }

    fn undo_call(&self, undo: &UndoArgs<'_>) -> ScriptCall {
        self.layout().undo_call(undo)
    }

    fn force_release_call(&self, request: &Request) -> ScriptCall {
        self.layout().force_release_call(request)
    }

    fn revocation_targets(&self) -> &'static str {
        self.layout().revocation_targets()
    }

    fn hold_field<'a>(&self, holder: &'a str) -> Cow<'a, str> {
        self.layout().hold_field(holder)
    }
}

/// One acquisition try: by the chain `holder`, which holds `levels_held` levels already (0: a
/// new chain), for a lease of `lease_ms`; for a write lock taken by the upgradable reader, an
/// `upgrade`, with the id of this try; for a reader whose thread holds the write lock, the
/// `writer`'s holder id (the reader may enter beside it). A fair-lock waiter that
/// `accepts_grant` may be handed the lock by a release while it waits (see [`grant_of`]). The
/// try is refused ([`Acquired::Late`]) when it reaches the server after `deadline_ms` (ms since
/// the epoch, on the server's clock).
pub(crate) struct TryArgs<'a> {
    pub(crate) holder: &'a str,
    pub(crate) levels_held: u32,
    pub(crate) lease_ms: u64,
    pub(crate) upgrade: Option<&'a str>,
    pub(crate) writer: Option<&'a str>,
    pub(crate) accepts_grant: bool,
    pub(crate) deadline_ms: u64,
}

/// One release: of a level of the chain `holder`, which keeps `levels_left` levels; remaining
/// levels get at least `lease_ms`. An upgrade's names the try whose grant it releases
/// (`upgrade`): a copy that comes after the chain upgraded again frees nothing. The answer is
/// kept as `window` says under `receipt` for a retry. A plain or write lock's last level is
/// handed on as `handing` says (see [`handed`]).
pub(crate) struct ReleaseArgs<'a> {
    pub(crate) receipt: &'a str,
    pub(crate) holder: &'a str,
    pub(crate) lease_ms: u64,
    pub(crate) window: Window,
    pub(crate) levels_left: u32,
    pub(crate) handing: Handing<'a>,
    pub(crate) upgrade: Option<&'a str>,
}

impl ReleaseArgs<'_> {
    /// Until when (ms since the epoch, on the server's clock) the answer is kept.
    pub(crate) fn receipt_until(&self) -> u64 {
        self.window.keep_until_ms()
    }
}

/// One undo: of what an acquisition by `holder` whose answer did not come may have added,
/// leaving the `levels_held` the chain had; of an upgrade's try (its id), only that try's
/// grant. Until `not_before` (see [`undo`]) a copy of the try may still come.
pub(crate) struct UndoArgs<'a> {
    pub(crate) holder: &'a str,
    pub(crate) levels_held: u32,
    pub(crate) upgrade: Option<&'a str>,
    pub(crate) not_before: u64,
}

/// Takes the lock as `this_try` says, for a lock of the kind `kind`.
pub(crate) fn acquire(kind: &dyn LockScripts, this_try: &TryArgs<'_>) -> ScriptCall {
    kind.acquire_call(this_try).arg(this_try.deadline_ms)
}

/// Releases a level as `release` says. A copy that comes after the window's deadline is
/// refused (`REDLEASE_LATE`).
pub(crate) fn release(kind: &dyn LockScripts, release: &ReleaseArgs<'_>) -> ScriptCall {
    kind.release_call(release).arg(release.window.deadline_ms())
}

/// Takes back what an acquisition whose answer did not come may have added, as `undo` says.
///
/// For a fair lock it also takes the holder's place in the queue back: the same call serves a
/// waiter that gives up. Until `not_before` (the deadline of the try it undoes, ms since the
/// epoch on the server's clock; 0: none) a copy of the try may still come: the undo answers
/// [`undo_again`](super::request::undo_again) then.
pub(crate) fn undo(kind: &dyn LockScripts, undo: &UndoArgs<'_>) -> ScriptCall {
    kind.undo_call(undo).arg(undo.not_before)
}

/// Frees the lock whoever holds it, telling each holder on the force-release channel.
/// Answers 1 when there was a lock to free. The read and write locks of a read-write lock
/// free it whole: readers and writer.
pub(crate) fn force_release(kind: &dyn LockScripts, request: &Request) -> ScriptCall {
    kind.force_release_call(request).request_args(request)
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

/// What a plain or write lock's release of its last level does for a chain of the releasing
/// process that waits for the lock.
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
    pub(crate) fn args(self, field: impl Fn(&str) -> String) -> (String, u64) {
        match self {
            Handing::No => (String::new(), 0),
            Handing::To { holder, lease_ms } => (field(holder), lease_ms),
        }
    }
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

/// Asks the holders that keep an acquisition of this kind out to let go, on the notice
/// channel (see [`LockScripts::revocation_targets`]), never `except` (an upgrade's own
/// upgradable read). Answers how many holds were asked.
pub(crate) fn request_revocation(
    kind: &dyn LockScripts,
    except: Option<&str>,
    deadline_ms: u64,
) -> ScriptCall {
    ScriptCall::new(&REQUEST_REVOCATION, &[&kind.keys().name])
        .arg(layout::FORCE_RELEASE_CHANNEL)
        .arg(kind.revocation_targets())
        .arg(except.unwrap_or_default())
        .arg(deadline_ms)
}
