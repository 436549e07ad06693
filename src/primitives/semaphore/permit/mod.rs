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

mod permit_guard;

use std::time::{Duration, Instant};

pub use permit_guard::PermitGuard;
use permit_guard::PermitHold;

use crate::client::call::replication::Acked;
use crate::client::wait::cancel::CancelToken;
use crate::client::wait::Attempt;
use crate::client::watchdog::lease;
use crate::client::watchdog::{Grant, Holding};
use crate::client::{Release, Undoing};
use crate::error::{Error, Result};
use crate::primitives::hold::guard::{Guard, Watched};
use crate::primitives::hold::handle::{LockHandle, RawAcquire, Terms};
use crate::primitives::semaphore::Semaphore;
use crate::protocol::names;
use crate::protocol::renew::HoldKind;
use crate::protocol::semaphore::{self as protocol, PermitId, PermitTaken};
use crate::protocol::Request;

/// A handle to one named semaphore whose permits each have an id and a lease. Cheap to
/// clone; `Send` and `Sync`.
///
/// Taking a permit returns a [`PermitGuard`] that gives it back when dropped. Taken without a
/// lease ([`lock`](LockHandle::lock)), the permit gets the watchdog timeout as its
/// lease and is renewed while its guard lives; taken with one
/// ([`leased_for`](LockHandle::leased_for)), it comes back when the lease
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
/// let permit = workers.lock()?; // renewed by the watchdog while it lives
/// assert!(workers.try_lock()?.is_none());
/// println!("rendering under permit {}", permit.permit_id());
/// drop(permit);
///
/// // A permit with a fixed lease comes back when the lease runs out, guard or not.
/// let short = workers.leased_for(Duration::from_millis(100)).lock()?;
/// let next = workers.try_lock_for(Duration::from_secs(5))?;
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
///
/// The acquisition calls (`lock`, `try_lock`, `try_lock_for`, `with_lock`, ...) are
/// [`LockHandle`]'s, shared with the locks: a permit semaphore is a lock that as many holders
/// may hold at once as it has permits. The rest is the semaphore's own.
pub type PermitSemaphore = LockHandle<RawPermits>;

/// The permits behind a [`PermitSemaphore`] handle (`pub` in a private module: it names the
/// handle's type, and has nothing to call from outside the crate).
#[derive(Clone)]
pub struct RawPermits {
    /// The count, and the client it runs calls and waits through.
    semaphore: Semaphore,
}

impl PermitSemaphore {
    pub(crate) fn new(semaphore: Semaphore) -> Self {
        LockHandle::from_raw(RawPermits { semaphore }, None)
    }

    /// The semaphore name: the Redis key of its count.
    pub fn name(&self) -> &str {
        self.raw().name()
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
        self.raw().release(&permit, Release::Waited)
    }

    /// How many permits are available now, after giving back those whose lease ran out (a
    /// count another client drove below zero reads as 0).
    pub fn available_permits(&self) -> Result<u64> {
        let keys = self.raw().semaphore.keys()?;
        let count: i64 = self
            .raw()
            .semaphore
            .run(&protocol::available_reclaiming(keys))?;
        Ok(count.max(0) as u64)
    }

    /// Sets the number of permits available if the semaphore does not exist yet, and wakes
    /// its waiters; answers whether it was set. As [`Semaphore::try_set_permits`].
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.raw().semaphore.try_set_permits(permits)
    }

    /// Adds `change` permits (a negative change takes available ones away), after giving
    /// back those whose lease ran out, and answers how many are available now. As
    /// [`Semaphore::add_permits`].
    pub fn add_permits(&self, change: i64) -> Result<u64> {
        self.raw()
            .semaphore
            .change(protocol::add_reclaiming, change)
    }
}

impl RawPermits {
    fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// Tries until `deadline` (forever with `None`) in the semaphore's wait loop, sleeping
    /// until a message or the end of the first lease of a permit taken.
    fn acquire_until(&self, terms: Terms<'_>) -> Result<Option<PermitGuard>> {
        let (deadline, lease, cancel) = (terms.deadline, terms.lease, terms.cancel);
        let client = self.semaphore.client();
        let lease_ms = lease.millis_or(client.watchdog_timeout_ms());
        let fixed_lease = lease.fixed_duration();
        self.semaphore.wait_until(deadline, cancel, || {
            let id = PermitId::random();
            let sent_at = Instant::now();
            let taken = match self.attempt(&id, lease_ms) {
                // Refused for coming late: it took nothing, and the clock is read anew.
                Err(err) if client.refused_late(&err) => return Ok(Attempt::Again),
                taken => taken?,
            };
            Ok(match taken {
                PermitTaken::Taken => match self.guard(id, fixed_lease, sent_at, cancel) {
                    Some(guard) => Attempt::Taken(guard),
                    // Granted after its lease ran out (and given back).
                    None => Attempt::TooLate(Error::LeaseSpent {
                        name: self.name().to_owned(),
                        elapsed: sent_at.elapsed(),
                    }),
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
        let request = client.take_request(&keys.name, &id.to_hex());
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
                client.forget(request, &call);
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
        let until = request.undo_until();
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

    /// The guard of the permit `id`, taken by a request sent at `sent_at`; `None` (the permit
    /// given back) when the grant came after its lease ran out by the local clock. The guard's
    /// handle has the acquisition's `cancel`.
    fn guard(
        &self,
        id: PermitId,
        fixed_lease: Option<Duration>,
        sent_at: Instant,
        cancel: Option<&CancelToken>,
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
        let grant = Grant::of(0, false);
        let watchdog = self.semaphore.client().watchdog();
        let lease_length = fixed_lease.unwrap_or_else(|| watchdog.timeout());
        // A grant that came after its lease ran out by the local clock (a slow network, a
        // frozen master) would be lost the moment it is handed out.
        let in_time = lease::deadline(sent_at, lease_length) > Instant::now();
        match in_time
            .then(|| watchdog.watch(holding, grant, sent_at, fixed_lease))
            .flatten()
        {
            Some((lease, _)) => {
                let hold = PermitHold {
                    semaphore: LockHandle::from_raw(self.clone(), cancel.cloned()),
                    id,
                    hex,
                    watched: Watched::new(watch_key, &lease, fixed_lease),
                };
                Some(Guard::from_hold(hold, lease))
            }
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
        // After its lease, a permit is given back by the next script anyway: a dropped guard's
        // release is sent until then.
        let send_for = client.watchdog_timeout().max(client.outage_grace());
        let release = |request: &_| protocol::release_permit(keys, id, request);
        let released = client.release_by_request::<i64>(&keys.name, send_for, release, how)?;
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

impl RawAcquire for RawPermits {
    type Hold = PermitHold;

    fn acquire(&self, terms: Terms<'_>) -> Result<Option<PermitGuard>> {
        self.acquire_until(terms)
    }
}

impl std::fmt::Debug for RawPermits {
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
