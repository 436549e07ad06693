//! The scripts of a read-write lock's three kinds (Redisson's `RReadWriteLock` layout: one
//! hash with a `mode` field, a field per reader chain, the writer's field `<holder>:write`,
//! a timeout key per read level): the read lock, the write lock, and the upgradable read,
//! a reader's hold that at most one chain has at a time and that its holder may turn into
//! the write lock. The three share the channel, the undo and the forced release.

use std::borrow::Cow;

use super::{LockScripts, ReleaseArgs, TryArgs, UndoArgs};
use crate::layout;
use crate::protocol::names::{LockKeys, RELEASE_MESSAGE, WAKE_ALL_MESSAGE};
use crate::protocol::script::{lua_script, ScriptCall};
use crate::protocol::Request;

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
lua_script!(UNDO = "try_undo_begin.lua" + "rwlock_undo.lua" + "try_undo_end.lua");
lua_script!(FORCE_RELEASE = "request_begin.lua" + "rwlock_force_release.lua" + "request_end.lua");

/// The read lock of a read-write lock.
#[derive(Debug)]
pub(crate) struct Read {
    keys: LockKeys,
}

/// The write lock of a read-write lock.
#[derive(Debug)]
pub(crate) struct Write {
    keys: LockKeys,
}

/// The upgradable read of a read-write lock.
#[derive(Debug)]
pub(crate) struct Upgradable {
    keys: LockKeys,
}

/// The keys of the read-write lock `name`: its hash, the channel its three kinds share.
fn rwlock_keys(name: &str) -> LockKeys {
    LockKeys::new(name, layout::rwlock_channel(name))
}

impl Read {
    pub(crate) fn new(name: &str) -> Self {
        Read {
            keys: rwlock_keys(name),
        }
    }
}

impl Write {
    pub(crate) fn new(name: &str) -> Self {
        Write {
            keys: rwlock_keys(name),
        }
    }
}

impl Upgradable {
    pub(crate) fn new(name: &str) -> Self {
        Upgradable {
            keys: rwlock_keys(name),
        }
    }
}

impl LockScripts for Read {
    fn keys(&self) -> &LockKeys {
        &self.keys
    }

    fn acquire_call(&self, this_try: &TryArgs<'_>) -> ScriptCall {
        let keys = &self.keys;
        ScriptCall::new(&READ_ACQUIRE, &[&keys.name, &keys.token])
            .arg(this_try.lease_ms)
            .arg(this_try.holder)
            .arg(this_try.levels_held)
            .arg(layout::read_level_prefix(&keys.name, this_try.holder))
            .arg(writer_beside(this_try))
    }

    fn release_call(&self, release: &ReleaseArgs<'_>) -> ScriptCall {
        read_release(&self.keys, release)
    }

    fn undo_call(&self, undo: &UndoArgs<'_>) -> ScriptCall {
        read_undo(&self.keys, undo)
    }

    fn force_release_call(&self, request: &Request) -> ScriptCall {
        force_release(&self.keys, request)
    }

    fn revocation_targets(&self) -> &'static str {
        "writer"
    }
}

impl LockScripts for Upgradable {
    fn keys(&self) -> &LockKeys {
        &self.keys
    }

    fn acquire_call(&self, this_try: &TryArgs<'_>) -> ScriptCall {
        let keys = &self.keys;
        ScriptCall::new(&UPGRADABLE_ACQUIRE, &[&keys.name, &keys.token])
            .arg(this_try.lease_ms)
            .arg(this_try.holder)
            .arg(this_try.levels_held)
            .arg(layout::read_level_prefix(&keys.name, this_try.holder))
            .arg(layout::suffixed(&keys.name, ""))
            .arg(writer_beside(this_try))
    }

    fn release_call(&self, release: &ReleaseArgs<'_>) -> ScriptCall {
        read_release(&self.keys, release)
    }

    fn undo_call(&self, undo: &UndoArgs<'_>) -> ScriptCall {
        read_undo(&self.keys, undo)
    }

    fn force_release_call(&self, request: &Request) -> ScriptCall {
        force_release(&self.keys, request)
    }

    fn revocation_targets(&self) -> &'static str {
        "upgrade"
    }
}

impl LockScripts for Write {
    fn keys(&self) -> &LockKeys {
        &self.keys
    }

    fn acquire_call(&self, this_try: &TryArgs<'_>) -> ScriptCall {
        let keys = &self.keys;
        ScriptCall::new(&WRITE_ACQUIRE, &[&keys.name, &keys.token])
            .arg(this_try.lease_ms)
            .arg(layout::writer_field(this_try.holder))
            .arg(this_try.levels_held)
            .arg(this_try.holder)
            .arg(layout::suffixed(&keys.name, ""))
            .arg(this_try.upgrade.unwrap_or_default())
    }

    fn release_call(&self, release: &ReleaseArgs<'_>) -> ScriptCall {
        let keys = &self.keys;
        let (to, to_lease_ms) = release.handing.args(layout::writer_field);
        let script_keys = [&keys.name, &keys.channel, release.receipt, &keys.token];
        ScriptCall::new(&WRITE_RELEASE, &script_keys)
            .arg(layout::writer_field(release.holder))
            .arg(release.lease_ms)
            .arg(release.receipt_until())
            .arg(WAKE_ALL_MESSAGE)
            .arg(release.levels_left)
            .arg(layout::suffixed(&keys.name, ""))
            .arg(to)
            .arg(to_lease_ms)
            .arg(release.upgrade.unwrap_or_default())
    }

    fn undo_call(&self, undo: &UndoArgs<'_>) -> ScriptCall {
        let keys = &self.keys;
        ScriptCall::new(&UNDO, &[&keys.name, &keys.channel])
            .arg(layout::writer_field(undo.holder))
            .arg(undo.levels_held)
            .arg("")
            .arg(WAKE_ALL_MESSAGE)
            .arg(undo.upgrade.unwrap_or_default())
    }

    fn force_release_call(&self, request: &Request) -> ScriptCall {
        force_release(&self.keys, request)
    }

    fn hold_field<'a>(&self, holder: &'a str) -> Cow<'a, str> {
        Cow::Owned(layout::writer_field(holder))
    }
}

/// The write lock's field of the thread of a reader's try, which lets the reader in beside
/// it ('': the thread holds no write lock).
fn writer_beside(this_try: &TryArgs<'_>) -> String {
    this_try
        .writer
        .map(layout::writer_field)
        .unwrap_or_default()
}

/// The release of a reader's level (plain or upgradable).
fn read_release(keys: &LockKeys, release: &ReleaseArgs<'_>) -> ScriptCall {
    ScriptCall::new(&READ_RELEASE, &[&keys.name, &keys.channel, release.receipt])
        .arg(release.holder)
        .arg(release.lease_ms)
        .arg(release.receipt_until())
        .arg(RELEASE_MESSAGE)
        .arg(release.levels_left)
        .arg(layout::suffixed(&keys.name, ""))
        .arg(WAKE_ALL_MESSAGE)
}

/// The undo of a reader's try (plain or upgradable).
fn read_undo(keys: &LockKeys, undo: &UndoArgs<'_>) -> ScriptCall {
    ScriptCall::new(&UNDO, &[&keys.name, &keys.channel])
        .arg(undo.holder)
        .arg(undo.levels_held)
        .arg(layout::read_level_prefix(&keys.name, undo.holder))
        .arg(WAKE_ALL_MESSAGE)
        .arg("")
}

/// The forced release of the whole read-write lock: readers and writer.
fn force_release(keys: &LockKeys, request: &Request) -> ScriptCall {
    ScriptCall::new(
        &FORCE_RELEASE,
        &[&keys.name, &keys.channel, &keys.token, request.key()],
    )
    .arg(WAKE_ALL_MESSAGE)
    .arg(layout::FORCE_RELEASE_CHANNEL)
}
