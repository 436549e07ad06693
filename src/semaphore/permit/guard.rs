//! [`PermitGuard`]: one permit of a [`PermitSemaphore`], given back when dropped.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use super::PermitSemaphore;
use crate::client::Release;
use crate::error::{LostReason, Result};
use crate::hold::guard::{Guard, Hold};
use crate::protocol::semaphore::PermitId;
use crate::watchdog::lease::LeaseState;

/// One permit of a [`PermitSemaphore`], taken by the current thread: a [`Guard`] (with its
/// `is_lost`, `check`, `lost_signal` and `unlock`) that also knows its permit id.
///
/// Dropping the guard gives the permit back and wakes the waiters;
/// [`release`](Guard::release) (or [`unlock`](Guard::unlock)) does the same and says how it
/// went, where `Drop` can only log a failure. While it lives, the watchdog renews the permit's lease, unless it was
/// taken with a fixed lease. Like a [`LockGuard`](crate::LockGuard) it tells when the permit
/// is known to be lost, is `Sync` but not `Send`, and owns a clone of its handle.
///
/// ```compile_fail
/// fn moves_to_another_thread<T: Send>() {}
/// moves_to_another_thread::<redlease::PermitGuard>();
/// ```
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// let uploads = manager.permit_semaphore("uploads");
/// uploads.add_permits(3)?;
/// let permit = uploads.acquire()?;
/// assert_eq!(uploads.available_permits()?, 2);
/// permit.check()?; // Err(Error::LockLost { .. }) once the permit is known to be lost
/// permit.release()?;
/// assert_eq!(uploads.available_permits()?, 3);
/// # Ok(())
/// # }
/// ```
pub type PermitGuard = Guard<PermitHold>;

/// What a [`PermitGuard`] holds (`pub` in a private module: it names the guard's type).
pub struct PermitHold {
    semaphore: PermitSemaphore,
    id: PermitId,
    /// The id as users and the watchdog know it.
    hex: String,
    /// The permit's key in the watchdog.
    watch_key: String,
    /// `None` when the watchdog renews the lease.
    fixed_lease: Option<Duration>,
    lease: Arc<LeaseState>,
}

impl Hold for PermitHold {
    fn label(&self) -> String {
        self.semaphore.name().to_owned()
    }

    fn lost(&self) -> Option<LostReason> {
        self.lease.lost()
    }

    fn lost_signal(&self) -> Receiver<LostReason> {
        self.lease.signal()
    }

    fn release(&self, how: Release) -> Result<()> {
        let watchdog = self.semaphore.semaphore.client().watchdog();
        watchdog.unwatch(&self.watch_key, &self.lease, self.fixed_lease.is_some());
        self.semaphore.release(&self.id, how)
    }
}

impl Guard<PermitHold> {
    pub(super) fn new(
        semaphore: PermitSemaphore,
        id: PermitId,
        hex: String,
        watch_key: String,
        fixed_lease: Option<Duration>,
        lease: Arc<LeaseState>,
    ) -> Self {
        Guard::from_hold(PermitHold {
            semaphore,
            id,
            hex,
            watch_key,
            fixed_lease,
            lease,
        })
    }

    /// The semaphore this permit belongs to.
    pub fn semaphore(&self) -> &PermitSemaphore {
        &self.hold().semaphore
    }

    /// The permit's id: 32 lowercase hex digits, as Redisson shows its permit ids. Another
    /// process may give the permit back with [`PermitSemaphore::release_id`].
    pub fn permit_id(&self) -> &str {
        &self.hold().hex
    }

    /// Gives the permit back now and reports the outcome: [`NotHeld`](crate::Error::NotHeld)
    /// when it was given back before (its lease ran out, or someone released its id), or
    /// [`Indeterminate`](crate::Error::Indeterminate) when Redis did not answer within the
    /// outage grace (see the crate's "On a bad day").
    ///
    /// The same as [`unlock`](Guard::unlock), under a semaphore's word.
    pub fn release(self) -> Result<()> {
        self.unlock()
    }
}

impl std::fmt::Debug for PermitHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hold = self;
        f.debug_struct("PermitGuard")
            .field("name", &hold.semaphore.name())
            .field("permit_id", &hold.hex)
            .field("fixed_lease", &hold.fixed_lease)
            .field("lost", &hold.lease.lost())
            .finish()
    }
}
