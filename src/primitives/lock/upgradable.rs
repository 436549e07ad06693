//! The upgradable read of a read-write lock: [`UpgradableLock`] and its [`UpgradableGuard`].
//!
//! It is a lock of the [`Upgradable`] kind (a reader's hold, which the
//! hash's `upgrader` field reserves for one chain at a time), acquired through the lock's own
//! code; this module only wraps its guard, whose upgrade is the write lock taken by the same
//! thread: the write lock joins the upgradable chain's holder id, and its script lets that
//! holder in once no other reader is left.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lock_guard::{LockHold, OverLockHold};
use super::{Lock, LockGuard, RawLock, Upgradable};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::primitives::hold::guard::Guard;
use crate::primitives::hold::handle::{
    revocable_handle, LockHandle, RawAcquire, RawRevocable, Terms,
};

/// The upgradable read of a [`ReadWriteLock`](crate::ReadWriteLock), from
/// [`ReadWriteLock::upgradable`](crate::ReadWriteLock::upgradable): a read hold that shares
/// the lock with plain readers, keeps writers out as they do, and is held by one chain at a
/// time; its guard can [`upgrade`](UpgradableGuard::upgrade) to the write lock without a
/// window for another writer. Cheap to clone; `Send` and `Sync`.
///
/// The acquisition calls (`lock`, `try_lock_for`, `cancellable_by`, ...) are [`LockHandle`]'s.
/// The hold is renewed by the watchdog, reports losses and risks, and carries a fencing
/// token, as a read lock's does.
pub type UpgradableLock = LockHandle<RawUpgradable>;

/// The raw upgradable read behind an [`UpgradableLock`] (`pub` in a private module: it names
/// the handle's type).
#[derive(Clone, Debug)]
pub struct RawUpgradable {
    read: RawLock,
    write: RawLock,
}

impl RawAcquire for RawUpgradable {
    type Hold = UpgradableHold;

    fn acquire(&self, terms: Terms<'_>) -> Result<Option<UpgradableGuard>> {
        let cancel = terms.cancel.cloned();
        self.read.acquire_level(terms, |read| UpgradableHold {
            write: LockHandle::from_raw(self.write.upgrading(read.holder()), cancel.clone()),
            read,
        })
    }
}

revocable_handle!(RawUpgradable);

impl RawRevocable for RawUpgradable {
    fn request_revocation(&self) -> Result<usize> {
        self.read.request_revocation()
    }
}

impl UpgradableLock {
    pub(crate) fn of(client: Arc<Client>, name: &str, write: &Lock) -> Self {
        let read = Lock::of_kind(client, Arc::new(Upgradable::new(name)))
            .raw()
            .clone();
        let raw = RawUpgradable {
            read,
            write: write.raw().clone(),
        };
        LockHandle::from_raw(raw, None)
    }

    /// The lock name: the Redis key of the read-write lock.
    pub fn name(&self) -> &str {
        self.raw().read.name()
    }

    /// Whether an upgradable reader holds the lock now (upgraded or not).
    pub fn is_locked(&self) -> Result<bool> {
        self.as_lock().is_locked()
    }

    /// Whether the calling thread holds the upgradable read, as this process knows it. No
    /// I/O.
    pub fn is_held_by_current_thread(&self) -> bool {
        self.as_lock().is_held_by_current_thread()
    }

    fn as_lock(&self) -> Lock {
        LockHandle::from_raw(self.raw().read.clone(), None)
    }
}

/// What an [`UpgradableGuard`] holds (`pub` in a private module: it names the guard's type).
pub struct UpgradableHold {
    read: LockHold,
    /// The write lock its upgrades take, with the cancel token of the acquisition.
    write: Lock,
}

impl OverLockHold for UpgradableHold {
    const GUARD: &'static str = "UpgradableGuard";

    fn lock_hold(&self) -> &LockHold {
        &self.read
    }
}

/// The upgradable read of a read-write lock, held by the current thread: a [`Guard`] (lost
/// and at-risk signals, `valid_for`, `unlock`) that can be upgraded to the write lock.
///
/// [`upgrade`](Self::upgrade) (or [`try_upgrade_for`](Self::try_upgrade_for),
/// [`try_upgrade_until`](Self::try_upgrade_until)) waits until the plain readers have left,
/// then takes the write lock in the same script that finds them gone: no writer can enter in
/// between, as this hold kept writers out all along. It answers the write lock's
/// [`LockGuard`], with a fresh fencing token; dropping it (or
/// [`downgrade`](Self::downgrade)) goes back to the upgradable read, and lets readers in
/// again. (A thread that held the write lock before it took this hold writes already: its
/// upgrade enters that write lock once more, with that lock's holder id and fencing
/// token.) Plain readers keep entering while an upgrade waits, as they do while a writer
/// waits. The upgradable reader reads already: its thread cannot take plain read levels of
/// the same lock beside it (nor the upgradable read beside plain ones): that is
/// [`Error::InvalidArgument`], where they would share one field in Redis, or an upgrade
/// would wait for its own thread.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// let config = manager.read_write_lock("config");
/// let upgradable = config.upgradable().lock()?;
/// // Plain readers share the lock with the upgradable reader; a second one waits.
/// let other = config.clone();
/// std::thread::spawn(move || -> redlease::Result<()> {
///     assert!(other.read().try_lock()?.is_some());
///     assert!(other.upgradable().try_lock()?.is_none());
///     assert!(other.write().try_lock()?.is_none());
///     Ok(())
/// })
/// .join()
/// .unwrap()?;
/// // It read the configuration, and finds it must change it: no writer came in meanwhile.
/// let writing = upgradable.upgrade()?;
/// assert!(writing.fencing_token() > upgradable.fencing_token());
/// upgradable.downgrade(writing)?; // readers may enter again
/// # Ok(())
/// # }
/// ```
pub type UpgradableGuard = Guard<UpgradableHold>;

impl Guard<UpgradableHold> {
    /// The fencing token of the upgradable read's acquisition (an upgrade's write guard has a
    /// greater one of its own).
    pub fn fencing_token(&self) -> u64 {
        self.hold().read.token
    }

    /// The holder id of the upgradable chain; its upgrades' write guards share it (but for a
    /// thread that held the write lock first: see [`UpgradableGuard`]).
    pub fn holder_id(&self) -> &str {
        &self.hold().read.holder
    }

    /// Upgrades to the write lock, waiting as long as it takes for the plain readers to
    /// leave (woken by the releases of `redlease` readers; a Java reader's release, or a
    /// reader that died, is waited for until the longest remaining read level's lease would
    /// end). Answers the write lock's guard: drop it, or [`downgrade`](Self::downgrade), to
    /// go back to reading. Ended by the cancel token of the handle this guard came from.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the upgradable hold is known lost, or found gone in Redis
    /// (freed by force, expired) while the upgrade waited: no write lock is taken then;
    /// [`Error::InvalidArgument`] from a thread other than the holder's (a guard shared by
    /// reference); otherwise as [`LockHandle::lock`].
    pub fn upgrade(&self) -> Result<LockGuard> {
        self.upgrades()?.lock()
    }

    /// Like [`upgrade`](Self::upgrade), without waiting: one try, `Ok(None)` when plain
    /// readers are there.
    pub fn try_upgrade(&self) -> Result<Option<LockGuard>> {
        self.upgrades()?.try_lock()
    }

    /// Like [`upgrade`](Self::upgrade), waiting at most `wait`: `Ok(None)` when the readers
    /// were still there.
    pub fn try_upgrade_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.upgrades()?.try_lock_for(wait)
    }

    /// Like [`upgrade`](Self::upgrade), waiting until `deadline` at most.
    pub fn try_upgrade_until(&self, deadline: Instant) -> Result<Option<LockGuard>> {
        self.upgrades()?.try_lock_until(deadline)
    }

    /// Goes back from the write lock to the upgradable read: releases `writing`, the guard
    /// an upgrade of this hold answered, and wakes the readers that wait. The same as
    /// dropping it, with its outcome.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (and `writing` is released all the same) when `writing`
    /// is not an upgrade of this hold (nor a level of the write lock the thread held before
    /// it took this hold, which its upgrades enter); otherwise as [`Guard::unlock`].
    pub fn downgrade(&self, writing: LockGuard) -> Result<()> {
        // An upgrade's, or the write lock's that the thread held before it read (an upgrade
        // then enters that write chain once more).
        let write_chain = self.hold().write.raw().current_chain_holder();
        let holder = writing.holder_id();
        let ours = (holder == self.holder_id() || write_chain.as_deref() == Some(holder))
            && writing.lock().name() == self.name();
        writing.unlock()?;
        match ours {
            true => Ok(()),
            false => Err(Error::InvalidArgument(format!(
                "downgrade: the write guard is not an upgrade of the upgradable read of {:?}",
                self.name()
            ))),
        }
    }

    fn name(&self) -> &str {
        self.hold().write.name()
    }

    /// The write lock, once the hold is found current and the calling thread its holder.
    fn upgrades(&self) -> Result<&Lock> {
        let hold = self.hold();
        // Read before the check: a hold found lost in between (a force release heard) is
        // then told as lost, not as another thread's.
        let ours = hold.read.lock.raw().current_chain_holder();
        self.check()?;
        if ours.as_deref() != Some(self.holder_id()) {
            return Err(Error::InvalidArgument(format!(
                "upgrade of {:?}: only the thread that holds the upgradable read may upgrade it",
                self.name()
            )));
        }
        Ok(&hold.write)
    }
}
