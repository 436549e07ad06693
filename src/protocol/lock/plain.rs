//! The reentrant lock's scripts: Redisson's `RLock` layout, a hash of holder id -> reentrancy
//! count whose TTL is the lease, with a release that may hand the lock to a waiting chain of
//! the releasing process. An election's lock takes the lock, undoes tries and is freed by
//! force with these scripts too (its release is its resignation, `super::super::election`).

use super::{LockScripts, ReleaseArgs, TryArgs, UndoArgs};
use crate::layout;
use crate::protocol::names::{LockKeys, RELEASE_MESSAGE};
use crate::protocol::script::{lua_script, ScriptCall};
use crate::protocol::Request;

lua_script!(ACQUIRE = "try_deadline.lua" + "acquire_levels.lua" + "lock_take.lua" + "acquire.lua");
lua_script!(RELEASE = "release_levels.lua" + "lock_give.lua" + "release.lua");
lua_script!(UNDO = "try_undo_begin.lua" + "undo.lua" + "try_undo_end.lua");
lua_script!(FORCE_RELEASE = "request_begin.lua" + "force_release.lua" + "request_end.lua");

/// The reentrant lock: a kind of lock with nothing but the keys every kind has.
#[derive(Debug)]
pub(crate) struct Plain {
    keys: LockKeys,
}

impl Plain {
    pub(crate) fn new(name: &str) -> Self {
        Plain {
            keys: LockKeys::new(name, layout::lock_channel(name)),
        }
    }
}

impl LockScripts for Plain {
    fn keys(&self) -> &LockKeys {
        &self.keys
    }

    fn acquire_call(&self, this_try: &TryArgs<'_>) -> ScriptCall {
        acquire(&self.keys, this_try)
    }

    fn release_call(&self, release: &ReleaseArgs<'_>) -> ScriptCall {
        let (to, to_lease_ms) = release.handing.args(str::to_owned);
        let keys = &self.keys;
        let script_keys = [&keys.name, &keys.channel, release.receipt, &keys.token];
        ScriptCall::new(&RELEASE, &script_keys)
            .arg(release.holder)
            .arg(release.lease_ms)
            .arg(release.receipt_until())
            .arg(RELEASE_MESSAGE)
            .arg(release.levels_left)
            .arg(to)
            .arg(to_lease_ms)
    }

    fn undo_call(&self, undo: &UndoArgs<'_>) -> ScriptCall {
        self::undo(&self.keys, undo)
    }

    fn force_release_call(&self, request: &Request) -> ScriptCall {
        force_release(&self.keys, request)
    }
}

/// The lock's acquisition, for a lock with the keys `keys` (a plain lock's or an election's).
pub(crate) fn acquire(keys: &LockKeys, this_try: &TryArgs<'_>) -> ScriptCall {
    ScriptCall::new(&ACQUIRE, &[&keys.name, &keys.token])
        .arg(this_try.lease_ms)
        .arg(this_try.holder)
        .arg(this_try.levels_held)
}

/// The lock's undo of a try, for a lock with the keys `keys`.
pub(crate) fn undo(keys: &LockKeys, undo: &UndoArgs<'_>) -> ScriptCall {
    ScriptCall::new(&UNDO, &[&keys.name, &keys.channel])
        .arg(undo.holder)
        .arg(undo.levels_held)
        .arg(RELEASE_MESSAGE)
}

/// The lock's forced release, for a lock with the keys `keys`.
pub(crate) fn force_release(keys: &LockKeys, request: &Request) -> ScriptCall {
    ScriptCall::new(
        &FORCE_RELEASE,
        &[&keys.name, &keys.channel, &keys.token, request.key()],
    )
    .arg(RELEASE_MESSAGE)
    .arg(layout::FORCE_RELEASE_CHANNEL)
}
