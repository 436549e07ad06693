//! The read lock's rules: its levels are watched apart from the thread's write chain; a
//! thread that holds the write lock reads beside it, by a chain of its own (a holder id no
//! later read shares, so that a release of an earlier read, come late, finds nothing of
//! the later one's); a thread reads by one reader's field, so plain read levels and the
//! upgradable read exclude each other in a thread.

use super::{Chain, LockKind, RawLock, Read};
use crate::error::{Error, Result};
use crate::protocol::lock::LockScripts;
use crate::protocol::names;
use crate::protocol::renew::HoldKind;

impl LockKind for Read {
    fn watch_key(&self, thread: u64) -> String {
        names::reader_watch_key(&self.keys().name, thread)
    }

    fn hold_kind(&self) -> HoldKind {
        HoldKind::ReadLock
    }

    fn is_locked(&self, lock: &RawLock) -> Result<bool> {
        mode_is(lock, "read")
    }

    fn chain_to_join(&self, lock: &RawLock, thread: u64) -> Result<Option<Chain>> {
        let upgradable = names::upgradable_watch_key(&self.keys().name, thread);
        reader_chain(lock, thread, &upgradable)
    }
}

/// Whether the read-write lock of `lock` is held in `mode` (`read` or `write`).
pub(super) fn mode_is(lock: &RawLock, mode: &str) -> Result<bool> {
    let held: Option<String> = lock.query(redis::cmd("HGET").arg(lock.name()).arg("mode"))?;
    Ok(held.as_deref() == Some(mode))
}

/// For a reader (plain or upgradable) without a chain: a new chain beside the thread's write
/// chain, if it holds one (the script lets it in by that writer's field); an error when the
/// thread holds the other kind of read (its watchdog key `other`).
pub(super) fn reader_chain(lock: &RawLock, thread: u64, other: &str) -> Result<Option<Chain>> {
    let watchdog = lock.client.watchdog();
    let name = lock.name();
    if watchdog.chain_of(other, thread).is_some() {
        return Err(Error::InvalidArgument(format!(
            "read-write lock {name:?}: a thread that holds the upgradable read (which reads \
             already) cannot hold plain read levels beside it, nor the other way round"
        )));
    }
    let writer_key = names::holder_watch_key(name, thread);
    let writer = watchdog.chain_of(&writer_key, thread);
    Ok(writer.map(|(writer, _)| Chain {
        writer: Some(writer.to_string()),
        ..Chain::of(lock.client.new_holder_id(), 0)
    }))
}
