//! The part every guard shares: one held level of some lock, released once, when dropped or
//! by `unlock`, and the questions about its loss.
//!
//! A primitive's guard wraps a [`GuardCore`] over its own [`Hold`] (what it holds and how to
//! release it) and adds what is particular to it. The core is `Sync` (another thread may
//! watch `is_lost` through a shared reference) but not `Send`: a lock is held by a thread,
//! and only that thread may release it. No I/O here beyond the hold's release.

use std::marker::PhantomData;

use crossbeam_channel::Receiver;

use crate::client::Release;
use crate::error::{Error, LostReason, Result};

/// What a guard holds, as its primitive knows it.
pub(crate) trait Hold {
    /// The name to report in errors and logs.
    fn label(&self) -> String;
    /// Why the hold is known to be lost, if it is.
    fn lost(&self) -> Option<LostReason>;
    /// A receiver that gets the reason once the loss is recorded.
    fn lost_signal(&self) -> Receiver<LostReason>;
    /// Releases this level.
    fn release(&self, how: Release) -> Result<()>;
}

/// One held level, released exactly once.
pub(crate) struct GuardCore<H: Hold> {
    hold: H,
    released: bool,
    /// `!Send` (the hold belongs to the thread that took it) but `Sync`.
    _thread_bound: PhantomData<std::sync::MutexGuard<'static, ()>>,
}

impl<H: Hold> GuardCore<H> {
    pub(crate) fn new(hold: H) -> Self {
        GuardCore {
            hold,
            released: false,
            _thread_bound: PhantomData,
        }
    }

    pub(crate) fn hold(&self) -> &H {
        &self.hold
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.hold.lost().is_some()
    }

    pub(crate) fn check(&self) -> Result<()> {
        match self.hold.lost() {
            Some(reason) => Err(Error::LockLost {
                name: self.hold.label(),
                reason,
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn lost_signal(&self) -> Receiver<LostReason> {
        self.hold.lost_signal()
    }

    pub(crate) fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.hold.release(Release::Waited)
    }
}

impl<H: Hold> Drop for GuardCore<H> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Err(err) = self.hold.release(Release::Dropped) {
            log::warn!(
                "lock {:?}: release on drop failed: {err}",
                self.hold.label()
            );
        }
    }
}

/// Runs `work` with `guard`, then releases it with `unlock`, whose failure (the lock was lost
/// before `work` ended) is the answer. When `work` panics, the guard's drop releases it while
/// unwinding.
pub(crate) fn run_holding<G, R>(
    guard: G,
    work: impl FnOnce(&G) -> R,
    unlock: impl FnOnce(G) -> Result<()>,
) -> Result<R> {
    let result = work(&guard);
    unlock(guard)?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    #[test]
    fn guards_may_be_shared_between_threads_but_stay_on_theirs() {
        fn shared<T: Sync>() {}
        shared::<crate::LockGuard>();
        shared::<crate::GroupGuard>();
        shared::<crate::PermitGuard>();
        // Not `Send`: see the `compile_fail` examples on `LockGuard` and `PermitGuard`.
    }

    #[test]
    fn handles_go_anywhere() {
        fn handle<T: Send + Sync + Clone>() {}
        handle::<crate::LockManager>();
        handle::<crate::Lock>();
        handle::<crate::ReadWriteLock>();
        handle::<crate::RedLock>();
        handle::<crate::MultiLock>();
        handle::<crate::FencedStore>();
        handle::<crate::Semaphore>();
        handle::<crate::PermitSemaphore>();
        handle::<crate::CountDownLatch>();
        handle::<crate::CancelToken>();
    }
}
