//! The upgradable read's rules: a reader's hold, watched apart from the thread's plain read
//! levels (which it excludes in a thread), renewed as a read level, and held when the
//! upgrader's field is set.

use super::read::reader_chain;
use super::{Chain, LockKind, RawLock, Upgradable};
use crate::error::Result;
use crate::protocol::lock::LockScripts;
use crate::protocol::names;
use crate::protocol::renew::HoldKind;

impl LockKind for Upgradable {
    fn watch_key(&self, thread: u64) -> String {
        names::upgradable_watch_key(&self.keys().name, thread)
    }

    fn hold_kind(&self) -> HoldKind {
        HoldKind::ReadLock
    }

    fn is_locked(&self, lock: &RawLock) -> Result<bool> {
        let field = crate::layout::UPGRADER_FIELD;
        lock.query(redis::cmd("HEXISTS").arg(lock.name()).arg(field))
    }

    fn chain_to_join(&self, lock: &RawLock, thread: u64) -> Result<Option<Chain>> {
        let readers = names::reader_watch_key(&self.keys().name, thread);
        reader_chain(lock, thread, &readers)
    }
}
