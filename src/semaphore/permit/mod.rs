//! The permit-expirable semaphore: the [`PermitSemaphore`] handle and its RAII
//! [`PermitGuard`].
//!
//! Redisson's `RPermitExpirableSemaphore` layout: the count of a [`Semaphore`] plus a zset of
//! the permits taken, each with an id and the end of its lease, so the permit of a holder that
//! died comes back by itself. Every script gives expired permits back first, by the server's
//! clock (Redisson's scripts by the Java client's: see the type's docs on mixing). Beyond
//! Redisson, a permit taken without a lease is kept by the client's watchdog while its guard
//! lives (as a lock is) and reported lost like one. A take whose answer does not come is
//! undone (the permit given back), by the cleanup thread once Redis answers if need be. The
//! handle waits and runs its calls through the [`Semaphore`] of the same name (the shared
//! wait loop, the pub/sub service, the pool) and tracks its guards' leases with the client's
//! watchdog. With replica
//! acknowledgements on, a permit whose take too few replicas acknowledged is given back and
//! the take fails ([`Error::NotReplicated`]); a release stands, and is counted.

mod guard;

use std::time::{Duration, Instant};

pub use guard::PermitGuard;

use crate::call::replication::Acked;
use crate::client::{Release, Undoing};
use crate::error::{Error, Result};
use crate::hold::handle::{Acquisition, Lease, RawAcquire};
use crate::protocol::names;
use crate::protocol::renew::HoldKind;
use crate::protocol::semaphore::{self as protocol, PermitId, PermitTaken};
use crate::protocol::Request;
use crate::semaphore::Semaphore;
use crate::wait::cancel::CancelToken;
use crate::wait::Attempt;
use crate::watchdog::lease;
use crate::watchdog::{Grant, Holding};

/// A handle to one named semaphore whose permits each have an id and a lease. Cheap to
/// clone; `Send` and `Sync`.
///
/// Taking a permit returns a [`PermitGuard`] that gives it back when dropped. Taken without a
/// lease ([`acquire`](PermitSemaphore::acquire)), the permit gets the watchdog timeout as its
/// lease and is renewed while its guard lives; taken with one
/// ([`acquire_with_lease`](PermitSemaphore::acquire_with_lease)), it comes back when the lease
/// runs out, guard or not. Either way a holder that dies gives its permit back within its
/// lease. The permits available are set as for a [`Semaphore`]
/// ([`try_set_permits`](PermitSemaphore::try_set_permits),
/// [`add_permits`](PermitSemaphore::add_permits)).
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// use std::time::Duration;
///
/// let workers = manager.permit_semaphore("render-workers");
/// workers.try_set_permits(1)?;
/// let permit = workers.acquire()?; // renewed by the watchdog while it lives
/// assert!(workers.try_acquire()?.is_none());
/// println!("rendering under permit {}", permit.permit_id());
/// drop(permit);
///
/// // A permit with a fixed lease comes back when the lease runs out, guard or not.
/// let short = workers.acquire_with_lease(Duration::from_millis(100))?;
/// let next = workers.try_acquire_for(Duration::from_secs(5))?;
/// assert!(next.is_some() && short.is_lost());
/// # Ok(())
/// # }
/// ```
///
/// # Next to Redisson's `RPermitExpirableSemaphore`
///
/// Both keep the zset `{name}:timeout` of permit id -> end of lease in epoch ms, and read it
/// by different clocks. `redlease`'s scripts write and judge lease ends by the Redis server's
/// clock (`TIME`), so Rust clients' clocks never matter. Redisson computes a lease end as the
/// Java client's `System.currentTimeMillis()` plus the lease, and its scripts (acquire,
/// `availablePermits`, `updateLeaseTime`, the release of several ids, ...) give back every
/// permit whose end is at or before the Java client's clock. A Java client whose clock is
/// `d` ahead of the server's thus takes back any permit, `redlease`'s included, that has less
/// than `d` left by the server's clock; one `d` behind writes lease ends that `redlease`
/// gives back `d` early. A watchdog-kept permit has about two thirds of the watchdog timeout
/// left just before each renewal. Mixed use is therefore safe while every Java host's clock
/// is well within the shortest lease in use of the Redis host's (keep them synchronised).
///
/// Permits without a lease differ: Redisson stores them with the score 922337203685477 and
/// nothing gives them back by time; `redlease` gives its own the score server time +
/// watchdog timeout, renewed while the guard lives (Java's `getLeaseTime` reports the
/// remaining watchdog lease, never -1). A renewal overwrites the score, so a Java
/// `updateLeaseTime` on a watchdog-kept `redlease` permit lasts until the next renewal, at
/// most a third of the watchdog timeout. Like Redisson's acquire, a take copies a TTL on the
/// count onto the zset.
#[derive(Clone)]
pub struct PermitSemaphore {
    /// The count, and the client it runs calls and waits through.
    semaphore: Semaphore,
}

impl PermitSemaphore {
    pub(crate) fn new(semaphore: Semaphore) -> Self {
        PermitSemaphore { semaphore }
    }

    /// The semaphore name: the Redis key of its count.
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// Takes a permit, waiting as long as it takes; the watchdog keeps it while the guard
    /// lives.
    ///
    /// Fails only when Redis cannot be reached (past the outage grace) or answers an error,
    /// or the manager is shut down; with
    /// [`replica_acks`](crate::LockManagerBuilder::replica_acks), also when a permit was
    /// taken but too few replicas acknowledged it in time ([`Error::NotReplicated`]: it was
    /// given back).
    pub fn acquire(&self) -> Result<PermitGuard> {
        self.acquisition().forever(Lease::Watchdog)
    }

    /// Takes a permit for a fixed `lease`, waiting as long as it takes. Nothing renews it: it
    /// comes back after `lease` even if the guard still lives.
    pub fn acquire_with_lease(&self, lease: Duration) -> Result<PermitGuard> {
        self.acquisition().forever(Lease::fixed(lease)?)
    }

    /// Takes a permit if one is available now, without waiting.
    pub fn try_acquire(&self) -> Result<Option<PermitGuard>> {
        self.acquisition().until(Instant::now(), Lease::Watchdog)
    }

    /// Takes a permit, waiting at most `wait` for one; `Ok(None)` when the wait ran out. A
    /// zero `wait` tries once.
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Option<PermitGuard>> {
        self.acquisition()
            .within(wait, Lease::Watchdog, "try_acquire_for")
    }

    /// Like [`try_acquire_for`](PermitSemaphore::try_acquire_for), with a fixed `lease` and no
    /// watchdog.
    pub fn try_acquire_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<PermitGuard>> {
        let lease = Lease::fixed(lease)?;
        self.acquisition()
            .within(wait, lease, "try_acquire_for_with_lease")
    }

    /// Takes a permit, waiting until `deadline` at most; `Ok(None)` when it passed. A deadline
    /// in the past tries once.
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Option<PermitGuard>> {
        self.acquisition().until(deadline, Lease::Watchdog)
    }

    /// Like [`try_acquire_until`](PermitSemaphore::try_acquire_until), with a fixed `lease`
    /// and no watchdog.
    pub fn try_acquire_until_with_lease(
        &self,
        deadline: Instant,
        lease: Duration,
    ) -> Result<Option<PermitGuard>> {
        self.acquisition().until(deadline, Lease::fixed(lease)?)
    }

    /// Runs `work` holding a permit, taken as by [`acquire`](PermitSemaphore::acquire), and
    /// gives it back on every way out, a panic included. Answers what `work` returned, or the
    /// error of the release when it failed (the permit was lost before `work` ended).
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// let renders = manager.permit_semaphore("renders");
    /// renders.try_set_permits(2)?;
    /// let id = renders.with_permit(|permit| permit.permit_id().to_owned())?;
    /// assert_eq!(id.len(), 32);
    /// assert_eq!(renders.available_permits()?, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_permit<T>(&self, work: impl FnOnce(&PermitGuard) -> T) -> Result<T> {
        Acquisition::<Self>::holding(self.acquire()?, work)
    }

    /// Like [`with_permit`](PermitSemaphore::with_permit), waiting at most `wait`:
    /// `Ok(None)`, without running `work`, when the wait ran out.
    pub fn with_permit_for<T>(
        &self,
        wait: Duration,
        work: impl FnOnce(&PermitGuard) -> T,
    ) -> Result<Option<T>> {
        self.acquisition()
            .holding_within(wait, Lease::Watchdog, "with_permit_for", work)
    }

    /// Like [`with_permit`](PermitSemaphore::with_permit), with a fixed `lease` and no
    /// watchdog.
    pub fn with_permit_with_lease<T>(
        &self,
        lease: Duration,
        work: impl FnOnce(&PermitGuard) -> T,
    ) -> Result<T> {
        Acquisition::<Self>::holding(self.acquire_with_lease(lease)?, work)
    }

    /// This handle, with its waits (and those of its clones) ended by `token`: once it is
    /// cancelled, they return [`Error::Cancelled`](crate::Error::Cancelled) promptly, leaving
    /// no subscription behind.
    pub fn with_cancel(&self, token: &CancelToken) -> PermitSemaphore {
        PermitSemaphore {
            semaphore: self.semaphore.with_cancel(token),
        }
    }

    /// Gives back the permit with this id (its [`PermitGuard::permit_id`]), whoever took it:
    /// for permits whose id was handed to another process, or whose guard was leaked with
    /// [`std::mem::forget`]. A guard that still holds the permit finds it lost at its next
    /// renewal ([`LostReason::NotHeldAnymore`](crate::LostReason::NotHeldAnymore)), or, with a
    /// fixed lease, when the lease ends.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an id that is not 32 hex digits; [`Error::NotHeld`] when
    /// no permit with this id is taken (it was given back already, or its lease ran out).
    pub fn release_id(&self, id: &str) -> Result<()> {
        let permit = PermitId::from_hex(id).ok_or_else(|| {
            Error::InvalidArgument(format!("{id:?} is not a permit id (32 hex digits)"))
        })?;
        self.release(&permit, Release::Waited)
    }

    /// How many permits are available now, after giving back those whose lease ran out (a
    /// count another client drove below zero reads as 0).
    pub fn available_permits(&self) -> Result<u64> {
        let keys = self.semaphore.keys()?;
        let count: i64 = self.semaphore.run(&protocol::available_reclaiming(keys))?;
        Ok(count.max(0) as u64)
    }

    /// Sets the number of permits available if the semaphore does not exist yet, and wakes
    /// its waiters; answers whether it was set. As [`Semaphore::try_set_permits`].
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.semaphore.try_set_permits(permits)
    }

    /// Adds `change` permits (a negative change takes available ones away), after giving
    /// back those whose lease ran out, and answers how many are available now. As
    /// [`Semaphore::add_permits`].
    pub fn add_permits(&self, change: i64) -> Result<u64> {
        self.semaphore.change(protocol::add_reclaiming, change)
    }

    fn acquisition(&self) -> Acquisition<'_, Self> {
        Acquisition::new(self, self.semaphore.cancel_token())
    }

    /// Tries until `deadline` (forever with `None`) in the semaphore's wait loop, sleeping
    /// until a message or the end of the first lease of a permit taken.
    fn acquire_until(
        &self,
        deadline: Option<Instant>,
        lease: Lease,
        cancel: Option<&CancelToken>,
    ) -> Result<Option<PermitGuard>> {
        let client = self.semaphore.client();
        let lease_ms = lease.millis_or(client.watchdog_timeout_ms());
        let fixed_lease = lease.fixed_duration();
        self.semaphore.wait_until(deadline, cancel, || {
            let id = PermitId::random();
            let sent_at = Instant::now();
            Ok(match self.attempt(&id, lease_ms)? {
                PermitTaken::Taken => match self.guard(id, fixed_lease, sent_at) {
                    Some(guard) => Attempt::Taken(guard),
                    None => Attempt::Again,
                },
                PermitTaken::Held { first_expiry } => Attempt::Held { hint: first_expiry },
            })
        })
    }

    /// One attempt to take a permit under `id`. When its answer does not come, a release of
    /// `id` is queued right behind it on the same connection: a late grant is given back at
    /// once instead of at the end of its lease. A grant that too few replicas acknowledged
    /// is given back too, and answered as an error: a failover now could erase it.
    fn attempt(&self, id: &PermitId, lease_ms: u64) -> Result<PermitTaken> {
        let keys = self.semaphore.keys()?;
        let client = self.semaphore.client();
        // The permit id is the request's id: new for every take.
        let request = Request::new(&keys.name, &id.to_hex(), client.answer_keep_ms());
        let call = protocol::take_permit(keys, id, lease_ms, &request);
        let taken = self.semaphore.run_acknowledged(&call, |connection| {
            // The take may still run: queue its undo right behind it, on the same connection.
            let undo = protocol::undo_take_permit(keys, id, &request);
            let undo = client.in_dialect(undo).as_eval();
            let _ = connection.send_packed_command(&undo.get_packed_command());
        });
        match taken {
            Ok(Acked {
                answer: PermitTaken::Taken,
                unreplicated: Some(why),
                ..
            }) => {
                // A failover now could erase the take: it must not count.
                self.undo_take(id, request, &why, Undoing::Now);
                Err(why.into_error(self.name()))
            }
            Ok(Acked { answer, .. }) => {
                client.forget(request);
                Ok(answer)
            }
            Err(err) => {
                if err.may_have_run() {
                    self.undo_take(id, request, &err, Undoing::Later);
                }
                Err(err)
            }
        }
    }

    /// Gives back the permit `id` that the take `request` took, if it ran, after `cause`; the
    /// cleanup thread sends the undo again until the server answers or the request's answer
    /// would be gone.
    fn undo_take(
        &self,
        id: &PermitId,
        request: Request,
        cause: &dyn std::fmt::Display,
        when: Undoing,
    ) {
        let keys = self.semaphore.keys_unchecked();
        let until = Instant::now() + Duration::from_millis(request.keep_ms());
        self.semaphore.client().undo(
            when,
            || {
                format!(
                    "semaphore {:?}: take of permit {} after {cause}",
                    keys.name,
                    id.to_hex()
                )
            },
            protocol::undo_take_permit(keys, id, &request),
            until,
        );
    }

    fn guard(
        &self,
        id: PermitId,
        fixed_lease: Option<Duration>,
        sent_at: Instant,
    ) -> Option<PermitGuard> {
        let hex = id.to_hex();
        let watch_key = names::permit_watch_key(self.name(), &hex);
        let holding = Holding {
            key: &watch_key,
            name: self.name(),
            holder: &hex,
            kind: HoldKind::Permit,
            thread: names::thread_number(),
        };
        // A permit is a chain of its own (no reentrant levels) and has no fencing token.
        let grant = Grant {
            token: 0,
            joins: false,
        };
        let watchdog = self.semaphore.client().watchdog();
        let lease_length = fixed_lease.unwrap_or_else(|| watchdog.timeout());
        // A grant that came after its lease ran out by the local clock (a slow network, a
        // frozen master) would be lost the moment it is handed out.
        let in_time = lease::deadline(sent_at, lease_length) > Instant::now();
        match in_time
            .then(|| watchdog.watch(holding, grant, sent_at, fixed_lease))
            .flatten()
        {
            Some((lease, _)) => Some(PermitGuard::new(
                self.clone(),
                id,
                hex,
                watch_key,
                fixed_lease,
                lease,
            )),
            None => {
                // Too late, or (for a level joining a chain, never here) refused: give the
                // permit back.
                if let Err(err) = self.release(&id, Release::Dropped) {
                    log::debug!(
                        "semaphore {:?}: release of a refused permit: {err}",
                        self.name()
                    );
                }
                None
            }
        }
    }

    /// Gives the permit `id` back; [`Error::NotHeld`] when it is not taken. A release that
    /// too few replicas acknowledged stands, and is counted.
    fn release(&self, id: &PermitId, how: Release) -> Result<()> {
        let keys = self.semaphore.keys()?;
        let client = self.semaphore.client();
        let request = client.request(&keys.name);
        let call = protocol::release_permit(keys, id, &request);
        // After its lease, a permit is given back by the next script anyway.
        let until = || Instant::now() + client.watchdog_timeout().max(client.outage_grace());
        let released = client.release::<i64>(&keys.name, call, request.into_key(), how, until)?;
        if released.answer == 1 {
            if let Some(why) = released.unreplicated {
                client.release_unreplicated(self.name(), &why);
            }
            Ok(())
        } else {
            Err(Error::NotHeld {
                name: keys.name.clone(),
            })
        }
    }
}

impl RawAcquire for PermitSemaphore {
    type Guard = PermitGuard;

    fn acquire(
        &self,
        deadline: Option<Instant>,
        lease: Lease,
        cancel: Option<&CancelToken>,
    ) -> Result<Option<PermitGuard>> {
        self.acquire_until(deadline, lease, cancel)
    }

    fn unlock(guard: PermitGuard) -> Result<()> {
        guard.unlock()
    }
}

impl std::fmt::Debug for PermitSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitSemaphore")
            .field("name", &self.name())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn handles_are_shared_freely_and_guards_stay_on_their_thread() {
        fn shared_and_sent<T: Send + Sync + Clone>() {}
        fn shared<T: Sync>() {}
        shared_and_sent::<crate::Semaphore>();
        shared_and_sent::<crate::PermitSemaphore>();
        shared::<crate::PermitGuard>();
        // Not `Send`: see the `compile_fail` example on `PermitGuard`.
    }
}
