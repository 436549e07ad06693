//! The write lock's rules: renewed as a writer's field; a thread that holds plain read
//! levels cannot take it; the thread's upgradable read takes it by its own chain (an
//! upgrade); releases hand it to a waiting writer of the process.

use super::read::mode_is;
use super::{Chain, LockKind, RawLock, Write};
use crate::error::{Error, LostReason, Result};
use crate::protocol::lock::LockScripts;
use crate::protocol::names;
use crate::protocol::renew::HoldKind;

impl LockKind for Write {
    fn hold_kind(&self) -> HoldKind {
        HoldKind::WriteLock
    }

    fn is_locked(&self, lock: &RawLock) -> Result<bool> {
        mode_is(lock, "write")
    }

    /// The upgrade of the thread's upgradable chain, if it has one (for an upgradable
    /// guard's write lock, it must be the guard's).
    fn chain_to_join(&self, lock: &RawLock, thread: u64) -> Result<Option<Chain>> {
        let watchdog = lock.client.watchdog();
        let name = &self.keys().name;
        let reader_key = names::reader_watch_key(name, thread);
        if watchdog.chain_of(&reader_key, thread).is_some() {
            return Err(Error::WriteWhileReading { name: name.clone() });
        }
        let upgradable_key = names::upgradable_watch_key(name, thread);
        let upgrader = watchdog.chain_of(&upgradable_key, thread);
        match (upgrader, &lock.upgrading) {
            (Some((upgrader, _)), expected)
                if expected
                    .as_ref()
                    .is_none_or(|expected| *expected == upgrader) =>
            {
                Ok(Some(Chain {
                    holder: upgrader.to_string(),
                    levels_held: 0,
                    upgrade: true,
                    writer: None,
                }))
            }
            (_, Some(_)) => Err(Error::LockLost {
                name: name.clone(),
                reason: LostReason::NotHeldAnymore,
            }),
            (_, None) => Ok(None),
        }
    }

    fn hands_off(&self) -> bool {
        true
    }
}
