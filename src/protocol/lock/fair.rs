//! The fair lock's scripts: Redisson's `RFairLock` layout, the lock's hash with a queue of
//! waiters and the expiries of their places, a channel per waiter, and the waiters that
//! accept a grant inside a release.

use super::{LockScripts, ReleaseArgs, TryArgs, UndoArgs};
use crate::layout;
use crate::protocol::names::{LockKeys, RELEASE_MESSAGE};
use crate::protocol::script::{lua_script, ScriptCall};
use crate::protocol::Request;

lua_script!(
    ACQUIRE = "try_deadline.lua" + "fair_queue.lua" + "acquire_levels.lua" + "fair_acquire.lua"
);
lua_script!(RELEASE = "fair_queue.lua" + "release_levels.lua" + "fair_release.lua");
lua_script!(UNDO = "try_undo_begin.lua" + "fair_undo.lua" + "try_undo_end.lua");
lua_script!(FORCE_RELEASE = "request_begin.lua" + "fair_force_release.lua" + "request_end.lua");

/// The fair lock: waiters take it in the order they came; a place in the queue is kept
/// `place_ms` after the place ahead of it expires.
#[derive(Debug)]
pub(crate) struct Fair {
    keys: LockKeys,
    queue: String,
    places: String,
    grants: String,
    pub(crate) place_ms: u64,
}

impl Fair {
    pub(crate) fn new(name: &str, place_ms: u64) -> Self {
        Fair {
            keys: LockKeys::new(name, layout::lock_channel(name)),
            queue: layout::fair_queue(name),
            places: layout::fair_places(name),
            grants: layout::fair_grants(name),
            place_ms,
        }
    }

    /// The channel the waiter with holder id `holder` is woken on, and granted the lock.
    pub(crate) fn waiter_channel(&self, holder: &str) -> String {
        layout::fair_waiter_channel(&self.keys.name, holder)
    }
}

impl LockScripts for Fair {
    fn keys(&self) -> &LockKeys {
        &self.keys
    }

    fn acquire_call(&self, this_try: &TryArgs<'_>) -> ScriptCall {
        let keys = &self.keys;
        let script_keys: [&str; 5] = [
            &keys.name,
            &self.queue,
            &self.places,
            &keys.token,
            &self.grants,
        ];
        ScriptCall::new(&ACQUIRE, &script_keys)
            .arg(this_try.lease_ms)
            .arg(this_try.holder)
            .arg(this_try.levels_held)
            .arg(self.place_ms)
            .arg(u8::from(this_try.accepts_grant))
    }

    fn release_call(&self, release: &ReleaseArgs<'_>) -> ScriptCall {
        let keys = &self.keys;
        let script_keys: [&str; 6] = [
            &keys.name,
            &self.queue,
            &self.places,
            release.receipt,
            &self.grants,
            &keys.token,
        ];
        ScriptCall::new(&RELEASE, &script_keys)
            .arg(release.holder)
            .arg(release.lease_ms)
            .arg(release.receipt_until())
            .arg(RELEASE_MESSAGE)
            .arg(release.levels_left)
            .arg(&keys.channel)
            .arg(self.place_ms)
    }

    fn undo_call(&self, undo: &UndoArgs<'_>) -> ScriptCall {
        let script_keys: [&str; 4] = [&self.keys.name, &self.queue, &self.places, &self.grants];
        ScriptCall::new(&UNDO, &script_keys)
            .arg(undo.holder)
            .arg(undo.levels_held)
            .arg(RELEASE_MESSAGE)
            .arg(&self.keys.channel)
            .arg(self.place_ms)
    }

    fn force_release_call(&self, request: &Request) -> ScriptCall {
        let keys = &self.keys;
        let script_keys = [&keys.name, &self.queue, &keys.token, request.key()];
        ScriptCall::new(&FORCE_RELEASE, &script_keys)
            .arg(RELEASE_MESSAGE)
            .arg(layout::FORCE_RELEASE_CHANNEL)
            .arg(&keys.channel)
    }
}
