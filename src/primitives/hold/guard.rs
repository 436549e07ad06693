//! [`Guard`]: what every guard is. One held level of a lock (or one permit), released exactly
//! once, when dropped or by [`unlock`](Guard::unlock), and the questions about its loss.
//!
//! A primitive's guard is a `Guard` over its own hold: the crate-internal [`Hold`] trait says
//! what it holds and how to release it, and the primitive adds, in an `impl` of its own
//! `Guard<…>`, what is particular to it (a fencing token, a permit id). The guard is `Sync`
//! (another thread may watch `is_lost` through a shared reference) but not `Send`: a lock is
//! held by a thread, and only that thread may release it. No I/O here beyond the hold's
//! release.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::watchdog::lease::{LeaseState, RiskChange};
use crate::client::watchdog::{LevelsLeft, Watchdog};
use crate::client::Release;
use crate::error::{Error, LostReason, Result};

pub(crate) use sealed::Hold;

mod sealed {
    use super::*;

    /// What a guard holds, as its primitive knows it. (`pub` in a private module: it bounds
    /// the public [`Guard`], and nothing outside the crate can name or implement it.)
    pub trait Hold {
        /// The guard's type name, for `Debug`.
        const GUARD: &'static str;

        /// Releases this level.
        fn release(&self, how: Release) -> Result<()>;

        /// The name to report in errors and logs.
        fn label(&self) -> String;

        /// The fields the guard's `Debug` shows beside its name and its loss.
        fn debug_fields(&self, guard: &mut std::fmt::DebugStruct<'_, '_>);

        /// A loss its lease does not record (yet), if any.
        fn lost_beyond_lease(&self) -> Option<LostReason> {
            None
        }

        /// A deadline its lease does not record, if any: when too few members of a group
        /// lock are left.
        fn deadline_beyond_lease(&self) -> Option<Instant> {
            None
        }
    }
}

/// A level the watchdog keeps: its key there, its lease's state, and its fixed lease if it
/// has one (else the watchdog renews it).
pub(crate) struct Watched {
    pub(crate) key: String,
    pub(crate) lease: Arc<LeaseState>,
    pub(crate) fixed_lease: Option<Duration>,
}

impl Watched {
    /// The level under `key` in the watchdog, its chain's lease `lease`.
    pub(crate) fn new(key: String, lease: &Arc<LeaseState>, fixed_lease: Option<Duration>) -> Self {
        let lease = Arc::clone(lease);
        Watched {
            key,
            lease,
            fixed_lease,
        }
    }

    /// Ends this level in `watchdog`: answers the levels its chain has left.
    pub(crate) fn unwatch(&self, watchdog: &Watchdog) -> LevelsLeft {
        watchdog.unwatch(&self.key, &self.lease, self.fixed_lease.is_some())
    }
}

/// One held level of a lock (or one permit), taken by the current thread: the type behind
/// [`LockGuard`](crate::LockGuard), [`GroupGuard`](crate::GroupGuard) and
/// [`PermitGuard`](crate::PermitGuard), which add their own methods to the ones here.
///
/// Dropping the guard releases the level; [`unlock`](Guard::unlock) does the same and says
/// how it went, where `Drop` can only log a failure. The guard is not `Send`: the lock is held
/// by a thread, and only that thread may release it. It is `Sync`, so a scoped thread may
/// watch [`is_lost`](Guard::is_lost) through a shared reference.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct Guard<H: Hold> {
    hold: H,
    /// The lease of the hold's chain, where its loss is recorded.
    lease: Arc<LeaseState>,
    released: bool,
    /// `!Send` (the hold belongs to the thread that took it) but `Sync`.
    _thread_bound: PhantomData<std::sync::MutexGuard<'static, ()>>,
}

impl<H: Hold> Guard<H> {
    pub(crate) fn from_hold(hold: H, lease: Arc<LeaseState>) -> Self {
        Guard {
            hold,
            lease,
            released: false,
            _thread_bound: PhantomData,
        }
    }

    pub(crate) fn hold(&self) -> &H {
        &self.hold
    }

    /// Why the hold is known to be lost, if it is.
    pub(crate) fn lost(&self) -> Option<LostReason> {
        self.lease.lost().or_else(|| self.hold.lost_beyond_lease())
    }

    /// Whether what this guard holds is known to be lost (see [`LostReason`]): a renewal
    /// found another holder or nothing, the lease ran out by the local clock before a
    /// renewal succeeded (or, for a fixed lease, at all), a force release was heard, or (for a
    /// group lock) fewer than the required members are still held. Cheap: no I/O.
    pub fn is_lost(&self) -> bool {
        self.lost().is_some()
    }

    /// How long the hold is certain for by the local monotonic clock: until the deadline by
    /// which the watchdog judges it lost (when the last successful renewal, or the
    /// acquisition, was sent, plus the lease, less 1 % of it and 2 ms for clock drift; for a
    /// group lock, until fewer than the required members are left by theirs). Zero once the
    /// hold is known to be lost. Cheap: no I/O.
    ///
    /// Redis keeps the key at least this long (its expiry counts from when it received the
    /// request, after it was sent), unless someone frees it by force or a failover loses it.
    /// A renewal moves it on while the guard lives; a fixed lease only shrinks.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use std::time::Duration;
    ///
    /// let guard = manager.lock("nightly-export").leased_for(Duration::from_secs(60)).lock()?;
    /// assert!(guard.valid_for() <= Duration::from_secs(60));
    /// assert!(guard.valid_for() > Duration::from_secs(50));
    /// # Ok(())
    /// # }
    /// ```
    pub fn valid_for(&self) -> Duration {
        if self.lost().is_some() {
            return Duration::ZERO;
        }
        let deadline = self.lease.deadline();
        let deadline = match self.hold.deadline_beyond_lease() {
            Some(beyond) => deadline.min(beyond),
            None => deadline,
        };
        deadline.saturating_duration_since(Instant::now())
    }

    /// How long the hold is certain for ([`valid_for`](Guard::valid_for)), when that is at
    /// least `margin`: a check before a step that must end while the lock is held (a commit,
    /// a write to the guarded resource).
    ///
    /// # Errors
    /// [`Error::LockLost`] once the hold is known to be lost; [`Error::ValidityTooShort`] when
    /// it is held for less than `margin` for sure.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use std::time::Duration;
    ///
    /// let guard = manager.lock("ledger").lock()?; // the watchdog's 30 s lease, renewed
    /// guard.check_valid_for(Duration::from_secs(5))?; // then commit: 5 s are certain
    /// assert!(matches!(
    ///     guard.check_valid_for(Duration::from_secs(3600)),
    ///     Err(redlease::Error::ValidityTooShort { .. })
    /// ));
    /// # Ok(())
    /// # }
    /// ```
    pub fn check_valid_for(&self, margin: Duration) -> Result<Duration> {
        self.check()?;
        let left = self.valid_for();
        if left < margin {
            // Known lost meanwhile: say so rather than that too little is left.
            self.check()?;
            return Err(Error::ValidityTooShort {
                name: self.hold.label(),
                left,
                margin,
            });
        }
        Ok(left)
    }

    /// `Err(Error::LockLost)` once what this guard holds is known to be lost, else `Ok(())`:
    /// a check for between the steps of a critical section.
    pub fn check(&self) -> Result<()> {
        match self.lost() {
            Some(reason) => Err(Error::LockLost {
                name: self.hold.label(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// A receiver that gets one message, the reason, once what this guard holds is found lost
    /// (at once if it already is). Suits `select!` or a monitoring thread; every call
    /// registers a new receiver for the life of the hold, and all of them fire, so take one
    /// and keep it rather than calling this in a loop. After
    /// [`LockManager::shutdown`](crate::LockManager::shutdown) it no longer fires;
    /// [`is_lost`](Guard::is_lost) still turns true at the deadline.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use crossbeam_channel::select;
    ///
    /// let (send_job, jobs) = crossbeam_channel::unbounded::<u32>();
    /// send_job.send(7).unwrap();
    /// drop(send_job);
    ///
    /// let guard = manager.lock("migration").lock()?;
    /// let lost = guard.lost_signal();
    /// loop {
    ///     select! {
    ///         recv(lost) -> reason => {
    ///             eprintln!("lock lost ({reason:?}): stop taking jobs");
    ///             break;
    ///         }
    ///         recv(jobs) -> job => match job {
    ///             Ok(job) => println!("migrating batch {job}"),
    ///             Err(_) => break, // no more jobs
    ///         },
    ///     }
    /// }
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost_signal(&self) -> Receiver<LostReason> {
        self.lease.signal()
    }

    /// Whether the hold is at risk or worse: a renewal of it failed (Redis unreachable, slow,
    /// failing over) and none has succeeded since, or it is lost. A hold at risk may well
    /// still be held (Redis keeps the key until its lease ends, and the watchdog keeps
    /// trying), but only until [`valid_for`](Guard::valid_for) runs out: a careful holder
    /// stops starting new work, and finishes or abandons what it is doing within that time.
    /// A hold with a fixed lease, which nothing renews, is never at risk before it is lost.
    /// Cheap: no I/O.
    pub fn is_at_risk(&self) -> bool {
        self.lost().is_some() || self.lease.risk().is_some()
    }

    /// A receiver that gets every change of the hold's risk from now on (and, when the hold
    /// is at risk already, that first): [`RiskChange::AtRisk`] with the reason when a renewal
    /// fails, [`RiskChange::Cleared`] when one succeeds again. It is disconnected once the
    /// hold is found lost (select on [`lost_signal`](Guard::lost_signal) as well to learn
    /// why). Every call registers a new receiver for the life of the hold; take one and keep
    /// it. A group lock is at risk while fewer than its required members are held and not
    /// at risk.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use crossbeam_channel::select;
    /// use redlease::RiskChange;
    /// use std::time::Duration;
    ///
    /// let guard = manager.lock("export").lock()?;
    /// let (risk, lost) = (guard.risk_signal(), guard.lost_signal());
    /// let mut paused = false;
    /// for batch in 0..3 {
    ///     select! {
    ///         recv(lost) -> reason => { eprintln!("lost: {reason:?}"); break; }
    ///         recv(risk) -> change => paused = matches!(change, Ok(RiskChange::AtRisk(_))),
    ///         default(Duration::from_millis(1)) => {}
    ///     }
    ///     if !paused {
    ///         println!("exporting batch {batch}");
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn risk_signal(&self) -> Receiver<RiskChange> {
        self.lease.risk_signal()
    }

    /// Whether someone asked the holder to let go
    /// ([`request_revocation`](crate::LockHandle::request_revocation), or a waiter's
    /// [`revoking_after`](crate::LockHandle::revoking_after)) since this hold's chain began.
    /// Revocation is cooperative: nothing is released unless the holder releases; the
    /// request only says that someone waits and would like the lock. Cheap: no I/O. A group
    /// lock's guard is never asked (ask its members' names).
    pub fn is_revocation_requested(&self) -> bool {
        self.lease.is_revocation_requested()
    }

    /// A receiver that gets one message once someone asks the holder to let go (at once if
    /// someone has), for `select!` beside [`lost_signal`](Guard::lost_signal); disconnected
    /// once the hold is found lost. Every call registers a new receiver; take one and keep
    /// it. The request reaches a holder in another process as a pub/sub notice, within a
    /// network round trip or so.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use std::time::Duration;
    ///
    /// let migration = manager.lock("schema-migration");
    /// let guard = migration.lock()?;
    /// let asked = guard.revocation_signal();
    /// // Elsewhere, someone who needs the lock asks for it:
    /// assert_eq!(migration.request_revocation()?, 1);
    /// // The holder hears it between steps, and decides to stop at a safe point.
    /// for step in 0..1000 {
    ///     if asked.recv_timeout(Duration::from_millis(1)).is_ok() {
    ///         println!("asked to let go after step {step}");
    ///         break;
    ///     }
    /// }
    /// assert!(guard.is_revocation_requested());
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn revocation_signal(&self) -> Receiver<()> {
        self.lease.revocation_signal()
    }

    /// Releases this level now and reports the outcome:
    /// [`Error::NotHeld`](crate::Error::NotHeld) when it was lost (expired, force-released,
    /// given back by id) before (a lock held with a lock delay whose lease expired is still
    /// in Redis for the delay: its release frees it, and answers `Ok`); for a group lock, [`Error::NoQuorum`](crate::Error::NoQuorum)
    /// when too few servers answered. Through an outage the release is sent again for up to
    /// the outage grace, then [`Error::Indeterminate`](crate::Error::Indeterminate); dropping
    /// the guard instead leaves that to the manager's cleanup thread.
    pub fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.hold.release(Release::Waited)
    }
}

impl<H: Hold> std::fmt::Debug for Guard<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut guard = f.debug_struct(H::GUARD);
        guard.field("name", &self.hold.label());
        self.hold.debug_fields(&mut guard);
        guard.field("lost", &self.lost()).finish()
    }
}

impl<H: Hold> Drop for Guard<H> {
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
