//! [`PermitGuard`]: one permit of a [`PermitSemaphore`], given back when dropped.

use super::PermitSemaphore;
use crate::client::Release;
use crate::error::Result;
use crate::primitives::hold::guard::{Guard, Hold, Watched};
use crate::protocol::semaphore::PermitId;

/// One permit of a [`PermitSemaphore`], taken by the current thread: a [`Guard`] (with its
/// `is_lost`, `check`, `lost_signal` and `unlock`) that also knows its permit id.
///
/// Dropping the guard gives the permit back and wakes the waiters;
/// [`unlock`](Guard::unlock) does the same and says how it went
/// ([`NotHeld`](crate::Error::NotHeld) when it was given back before: its lease ran out, or
/// someone released its id), where `Drop` can only log a failure. While it lives, the watchdog renews the permit's lease, unless it was
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
/// let permit = uploads.lock()?;
/// assert_eq!(uploads.available_permits()?, 2);
/// permit.check()?; // Err(Error::LockLost { .. }) once the permit is known to be lost
/// permit.unlock()?;
/// assert_eq!(uploads.available_permits()?, 3);
/// # Ok(())
/// # }
/// ```
pub type PermitGuard = Guard<PermitHold>;

/// What a [`PermitGuard`] holds (`pub` in a private module: it names the guard's type).
pub struct PermitHold {
    pub(super) semaphore: PermitSemaphore,
    pub(super) id: PermitId,
    /// The id as users and the watchdog know it.
    pub(super) hex: String,
    pub(super) watched: Watched,
}

impl Hold for PermitHold {
    const GUARD: &'static str = "PermitGuard";

    fn debug_fields(&self, guard: &mut std::fmt::DebugStruct<'_, '_>) {
        guard.field("permit_id", &self.hex);
        guard.field("fixed_lease", &self.watched.fixed_lease);
    }

    fn release(&self, how: Release) -> Result<()> {
        let raw = self.semaphore.raw();
        self.watched.unwatch(raw.semaphore.client().watchdog());
        raw.release(&self.id, how)
    }

    fn label(&self) -> String {
        self.semaphore.name().to_owned()
    }
}

impl Guard<PermitHold> {
    /// The semaphore this permit belongs to.
    pub fn semaphore(&self) -> &PermitSemaphore {
        &self.hold().semaphore
    }

    /// The permit's id: 32 lowercase hex digits, as Redisson shows its permit ids. Another
    /// process may give the permit back with [`PermitSemaphore::release_id`].
    pub fn permit_id(&self) -> &str {
        &self.hold().hex
    }
}
