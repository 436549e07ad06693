//! The acquisition API, written once: [`LockHandle`] gives every primitive that hands out a
//! guard ([`Lock`](crate::Lock), [`RedLock`](crate::RedLock), [`MultiLock`](crate::MultiLock),
//! [`PermitSemaphore`](crate::PermitSemaphore)) the same `lock` / `try_lock` / `_for` /
//! `_until` / `with_lock` calls and the same modifiers (`leased_for`, `cancellable_by`), with
//! the same semantics, over the crate-internal [`RawAcquire`] trait each implements (as
//! `lock_api` builds `Mutex` over `RawMutex`).
//!
//! It may use the wait layer (a wait without deadline, deadlines) and the protocol's lease
//! checks; it does no I/O of its own.

use std::fmt;
use std::time::{Duration, Instant};

use crate::client::wait;
use crate::client::wait::cancel::CancelToken;
use crate::error::Result;
use crate::primitives::hold::guard::{Guard, Hold};
use crate::protocol::names;

pub(crate) use raw::{Lease, RawAcquire, RawRevocable, Terms};

mod raw {
    use super::*;

    /// How long an acquisition keeps what it takes. (`pub` in a private module, as
    /// [`RawAcquire`] is.)
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Lease {
        /// The watchdog timeout, renewed while held.
        Watchdog,
        /// A fixed lease, never renewed; its length in whole milliseconds checked.
        Fixed { duration: Duration, millis: u64 },
    }

    /// What a primitive that hands out guards implements; [`LockHandle`] provides the rest.
    /// (`pub` in a private module: it bounds the public handle, and nothing outside the
    /// crate can name or implement it.)
    pub trait RawAcquire: Clone + fmt::Debug {
        /// What its guards hold.
        type Hold: Hold;

        /// Takes one level on `terms`.
        fn acquire(&self, terms: Terms<'_>) -> Result<Option<Guard<Self::Hold>>>;
    }

    /// What a primitive whose holders can be asked to let go implements (the locks, the
    /// upgradable read, a leadership); `revocable_handle!` writes the handle's
    /// `request_revocation` and `revoking_after` over it. Its `acquire` honours
    /// [`Terms::revoke_after`].
    pub trait RawRevocable: RawAcquire {
        /// Asks every holder to let go; answers how many holds were asked.
        fn request_revocation(&self) -> Result<usize>;
    }

    /// The terms of one acquisition: try until `deadline` (with `None`, until taken or
    /// failed; `Ok(None)` then means "try again"), keep it for `lease`, give up when `cancel`
    /// is cancelled.
    #[derive(Clone, Copy)]
    pub struct Terms<'a> {
        pub deadline: Option<Instant>,
        pub lease: Lease,
        pub cancel: Option<&'a CancelToken>,
        /// Ask the holders to let go once the wait has lasted this long (only ever set for a
        /// [`RawRevocable`] primitive).
        pub revoke_after: Option<Duration>,
    }
}

impl Lease {
    /// A fixed lease of `duration`, checked (not zero, a whole number of milliseconds Redis
    /// accepts).
    pub(crate) fn fixed(duration: Duration) -> Result<Lease> {
        let millis = names::holdable_lease_millis("lease", duration)?;
        Ok(Lease::Fixed { duration, millis })
    }

    /// The fixed lease's length; `None` for the watchdog's.
    pub(crate) fn fixed_duration(self) -> Option<Duration> {
        match self {
            Lease::Watchdog => None,
            Lease::Fixed { duration, .. } => Some(duration),
        }
    }

    /// The lease in milliseconds, `watchdog_ms` for the watchdog's.
    pub(crate) fn millis_or(self, watchdog_ms: u64) -> u64 {
        match self {
            Lease::Watchdog => watchdog_ms,
            Lease::Fixed { millis, .. } => millis,
        }
    }
}

/// Runs `work` with `guard`, then releases it, whose failure (the hold was lost before `work`
/// ended) is the answer. When `work` panics, the guard's drop releases it while unwinding.
fn holding<H: Hold, T>(guard: Guard<H>, work: impl FnOnce(&Guard<H>) -> T) -> Result<T> {
    let result = work(&guard);
    guard.unlock()?;
    Ok(result)
}

/// A handle to a distributed lock: the type behind [`Lock`](crate::Lock),
/// [`RedLock`](crate::RedLock), [`MultiLock`](crate::MultiLock) and
/// [`PermitSemaphore`](crate::PermitSemaphore) (a lock that as many holders may hold at once
/// as it has permits), which add their own methods to the acquisition calls here. Cheap to
/// clone; `Send` and `Sync`.
///
/// Every acquisition answers a guard that releases one level (or gives its permit back) when
/// dropped. The calls differ only in how long they wait (`lock`: as long as it takes;
/// `try_lock`: not at all; `try_lock_for` / `try_lock_until`: until a deadline, then
/// `Ok(None)`). How long the lock is kept, and what ends a wait early, are the handle's: the
/// watchdog's renewed lease, or a fixed one ([`leased_for`](LockHandle::leased_for)); a
/// cancel token ([`cancellable_by`](LockHandle::cancellable_by)); for the locks, a request
/// that the holders let go (`revoking_after`). A wait rides out an outage (Redis unreachable, slow, loading or failing
/// over) up to its deadline, or without one for up to the manager's
/// [`outage_grace`](crate::LockManagerBuilder::outage_grace), then fails with the last error.
#[derive(Clone)]
pub struct LockHandle<R> {
    raw: R,
    /// The fixed lease of this handle's acquisitions (`None`: the watchdog's), checked when
    /// one is made.
    lease: Option<Duration>,
    /// Ends this handle's waits when cancelled.
    cancel: Option<CancelToken>,
    /// This handle's waits ask the holders to let go once they have lasted this long.
    revoke_after: Option<Duration>,
}

impl<R> LockHandle<R> {
    pub(crate) fn from_raw(raw: R, cancel: Option<CancelToken>) -> Self {
        LockHandle {
            raw,
            lease: None,
            cancel,
            revoke_after: None,
        }
    }

    /// The primitive behind the handle.
    pub(crate) fn raw(&self) -> &R {
        &self.raw
    }

    /// This handle's terms (lease, cancel token, revocation) over another raw lock.
    pub(crate) fn with_raw(&self, raw: R) -> Self {
        LockHandle {
            raw,
            lease: self.lease,
            cancel: self.cancel.clone(),
            revoke_after: self.revoke_after,
        }
    }
}

impl<R: RawAcquire> LockHandle<R> {
    /// The terms of an acquisition that tries until `deadline`; an error for a bad lease.
    fn terms(&self, deadline: Option<Instant>) -> Result<Terms<'_>> {
        let lease = match self.lease {
            None => Lease::Watchdog,
            Some(lease) => Lease::fixed(lease)?,
        };
        Ok(Terms {
            deadline,
            lease,
            cancel: self.cancel.as_ref(),
            revoke_after: self.revoke_after,
        })
    }

    /// Waits as long as it takes.
    fn take_forever(&self) -> Result<Guard<R::Hold>> {
        let terms = self.terms(None)?;
        wait::without_deadline(|| self.raw.acquire(terms))
    }

    /// Waits until `deadline` at most: `Ok(None)` once it passed. A deadline in the past
    /// tries once.
    fn take_until(&self, deadline: Instant) -> Result<Option<Guard<R::Hold>>> {
        self.raw.acquire(self.terms(Some(deadline))?)
    }

    /// Waits `wait` at most; `call` names the public call in the error for a wait too long.
    fn take_within(&self, wait: Duration, call: &str) -> Result<Option<Guard<R::Hold>>> {
        self.take_until(wait::deadline_after(wait, call)?)
    }

    /// Takes the lock, waiting as long as it takes; the watchdog (for a group lock, each
    /// member's) keeps it while the guard lives.
    ///
    /// Fails when Redis cannot be reached (past the outage grace) or answers an error, or the
    /// manager is shut down; a group lock also when too few servers answer
    /// ([`Error::NoQuorum`](crate::Error::NoQuorum)). With replica acknowledgements (by
    /// default, on a master with replicas in sync), also when the lock was taken
    /// but too few replicas acknowledged it in time
    /// ([`Error::NotReplicated`](crate::Error::NotReplicated): it was given back, and the
    /// wait ends there, as every acquisition of the handle does).
    ///
    /// # Errors
    /// Also [`Error::InvalidArgument`](crate::Error::InvalidArgument), for every acquisition
    /// of a handle, when its fixed lease ([`leased_for`](LockHandle::leased_for)) is under
    /// 10 ms or too long.
    pub fn lock(&self) -> Result<Guard<R::Hold>> {
        self.take_forever()
    }

    /// Takes the lock if it is free (or held by this thread), without waiting: one try (for
    /// a group lock, one round trip to every server).
    pub fn try_lock(&self) -> Result<Option<Guard<R::Hold>>> {
        self.take_until(Instant::now())
    }

    /// Takes the lock, waiting at most `wait` for it; `Ok(None)` when the wait ran out. A zero
    /// `wait` tries once.
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<Guard<R::Hold>>> {
        self.take_within(wait, "try_lock_for")
    }

    /// Takes the lock, waiting until `deadline` at most; `Ok(None)` when it passed. A
    /// deadline in the past tries once.
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<Guard<R::Hold>>> {
        self.take_until(deadline)
    }

    /// Runs `work` holding the lock, taken as by [`lock`](LockHandle::lock), and releases it
    /// on every way out, a panic included (the guard's drop releases it while unwinding).
    ///
    /// Answers what `work` returned, or the error of the release when it failed: the lock
    /// was lost before `work` ended (see [`Error::NotHeld`](crate::Error::NotHeld)), so
    /// whatever it did may have overlapped with another holder.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// let total = manager.lock("invoice:42").with_lock(|guard| {
    ///     // ... only one thread in all processes runs this at a time ...
    ///     guard.fencing_token()
    /// })?;
    /// # assert!(total > 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_lock<T>(&self, work: impl FnOnce(&Guard<R::Hold>) -> T) -> Result<T> {
        holding(self.lock()?, work)
    }

    /// Like [`with_lock`](LockHandle::with_lock), waiting at most `wait`: `Ok(None)`, without
    /// running `work`, when the wait ran out.
    pub fn with_lock_for<T>(
        &self,
        wait: Duration,
        work: impl FnOnce(&Guard<R::Hold>) -> T,
    ) -> Result<Option<T>> {
        match self.take_within(wait, "with_lock_for")? {
            Some(guard) => holding(guard, work).map(Some),
            None => Ok(None),
        }
    }

    /// This handle, with its acquisitions (and those of its clones) taken for a fixed
    /// `lease`, which nothing renews: a hold expires after `lease` even if its guard still
    /// lives. The handle it is called on keeps the watchdog's lease.
    ///
    /// An acquisition of a handle whose lease is under 10 ms or too long fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use std::time::Duration;
    ///
    /// let export = manager.lock("nightly-export").leased_for(Duration::from_secs(60));
    /// if let Some(guard) = export.try_lock_for(Duration::from_secs(5))? {
    ///     // ... held for 60 s at most, renewed by nobody ...
    ///     guard.unlock()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn leased_for(&self, lease: Duration) -> Self {
        LockHandle {
            lease: Some(lease),
            ..self.clone()
        }
    }

    /// This handle, with its waits (and those of its clones) ended by `token`: once it is
    /// cancelled, they return [`Error::Cancelled`](crate::Error::Cancelled) promptly,
    /// leaving no subscription and no place in a fair lock's queue behind.
    pub fn cancellable_by(&self, token: &CancelToken) -> Self {
        LockHandle {
            cancel: Some(token.clone()),
            ..self.clone()
        }
    }
}

impl<R: RawRevocable> LockHandle<R> {
    /// See [`revocable_handle`]'s `request_revocation`.
    pub(crate) fn ask_holders(&self) -> Result<usize> {
        self.raw.request_revocation()
    }

    /// See [`revocable_handle`]'s `revoking_after`.
    pub(crate) fn with_revoke_after(&self, delay: Duration) -> Self {
        LockHandle {
            revoke_after: Some(delay),
            ..self.clone()
        }
    }
}

/// The revocation calls of the handles over `$raw`, a [`RawRevocable`] type: an `impl` of
/// each handle type of its own, so that its page shows them, and the pages of handles that
/// cannot be revoked do not (the documentation lists a generic `impl` on every alias of
/// [`LockHandle`], whatever its bounds).
macro_rules! revocable_handle {
    ($raw:ty) => {
        impl $crate::primitives::hold::handle::LockHandle<$raw> {
            /// Asks the current holders that keep this handle's acquisition out to let go (a
            /// lock's holder, a leader; every holder of a read-write lock for its write lock,
            /// its writer for its read lock, its writer and upgradable reader for its
            /// upgradable read): each holder's guard, in any process, gets a revocation request
            /// ([`Guard::is_revocation_requested`](crate::Guard::is_revocation_requested),
            /// [`Guard::revocation_signal`](crate::Guard::revocation_signal), the manager's
            /// [`on_revocation_request`](crate::LockManagerBuilder::on_revocation_request)
            /// callback). Answers how many holds were asked (0 when the lock is free).
            ///
            /// Cooperative, as Curator's revocable locks are: nothing is released unless the
            /// holder releases, and a holder that does not listen is not affected. The request
            /// goes out as a pub/sub notice: a holder whose pub/sub connection is down at that
            /// moment does not hear it (ask again). To free a lock whatever its holder does,
            /// see [`Lock::break_lock`](crate::Lock::break_lock).
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty name; the
            /// errors of a call to Redis.
            pub fn request_revocation(&self) -> $crate::error::Result<usize> {
                self.ask_holders()
            }

            /// This handle, with its waits (and those of its clones) asking the holders to let
            /// go ([`request_revocation`](Self::request_revocation)) once they have waited
            /// `delay`, once per wait: a waiter that needs the lock soon, or whose work
            /// outranks the holder's.
            ///
            /// ```
            /// # fn main() -> redlease::Result<()> {
            /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
            /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
            /// use std::time::Duration;
            ///
            /// let report = manager.lock("monthly-report");
            /// let (taken, holding) = std::sync::mpsc::channel();
            /// let holder = std::thread::spawn({
            ///     let report = report.clone();
            ///     move || -> redlease::Result<()> {
            ///         let guard = report.lock()?;
            ///         taken.send(()).unwrap();
            ///         // The holder works until someone asks, then lets go.
            ///         let _ = guard.revocation_signal().recv();
            ///         guard.unlock()
            ///     }
            /// });
            /// holding.recv().unwrap();
            /// let urgent = report.revoking_after(Duration::from_millis(50));
            /// let _mine = urgent.lock()?; // asks after 50 ms, and gets it once the holder lets go
            /// holder.join().unwrap()?;
            /// # Ok(())
            /// # }
            /// ```
            pub fn revoking_after(&self, delay: ::std::time::Duration) -> Self {
                self.with_revoke_after(delay)
            }
        }
    };
}
pub(crate) use revocable_handle;

impl<R: fmt::Debug> fmt::Debug for LockHandle<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.raw.fmt(f)
    }
}
