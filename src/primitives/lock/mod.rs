//! The reentrant lock: the [`Lock`] handle and its RAII [`LockGuard`].
//!
//! A [`Lock`] names one Redis hash (field = holder id, value = reentrancy count, TTL = lease)
//! and knows how to take, wait for, inspect and release it, with the protocol's lock scripts.
//! Each acquisition chain (a thread's hold from its first level to its last) has a
//! holder id of its own, which the client's watchdog keeps with the chain's levels: a level
//! joins the thread's chain, a first level starts a new one. An acquisition whose answer does
//! not come is undone by a script queued behind it; one that fewer replicas than the manager
//! asks for acknowledged is undone and reported ([`Error::NotReplicated`]). Releases whose
//! acknowledgements fall short stand, and are counted. It talks to Redis only through its
//! [`Client`]: the pool, the watchdog that renews leases, and the pub/sub service that wakes it
//! when a holder releases.

mod acquisition;
mod handoff;
mod kind;
mod lock_guard;
pub(crate) mod rwlock;
pub(crate) mod upgradable;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use acquisition::Acquisition;
pub(crate) use kind::{Fair, LockKind, NonReentrant, Plain, Read, Spin, Upgradable, Write};
pub use lock_guard::LockGuard;
pub(crate) use lock_guard::{LockHold, OverLockHold};

use crate::client::call::replication::Acked;
use crate::client::pubsub::Letterbox;
use crate::client::wait::cancel::CancelToken;
use crate::client::wait::line::Offer;
use crate::client::wait::{self, WaitFor};
use crate::client::watchdog::lease;
use crate::client::watchdog::{Grant, Holding, LevelsLeft};
use crate::client::{Client, Release, Undoing};
use crate::error::{Error, Result};
use crate::primitives::hold::guard::{Guard, Hold, Watched};
use crate::primitives::hold::handle::{
    revocable_handle, Lease, LockHandle, RawAcquire, RawRevocable, Terms,
};
use crate::protocol::lock::{self as protocol, Acquired, ReleaseArgs, TryArgs, UndoArgs};
use crate::protocol::names::{self, LockKeys};
use crate::protocol::renew::HoldKind;
use crate::protocol::ScriptCall;

/// A handle to one named distributed lock. Cheap to clone; `Send` and `Sync`.
///
/// The lock is reentrant per thread: a thread that holds it can take it again, and must
/// release it as many times (the non-reentrant kinds,
/// [`non_reentrant_lock`](crate::LockManager::non_reentrant_lock) and
/// [`non_reentrant_fair_lock`](crate::LockManager::non_reentrant_fair_lock), refuse instead).
/// Each acquisition returns a [`LockGuard`] that releases one level when dropped.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let url = redis.url();
/// let manager = redlease::LockManager::builder(url.as_str()).build()?;
/// let lock = manager.lock("invoice:42");
/// {
///     let _outer = lock.lock()?;
///     let _inner = lock.lock()?; // the same thread may enter again
///     assert_eq!(lock.hold_count()?, 2);
/// }
/// assert!(!lock.is_locked()?);
/// # Ok(())
/// # }
/// ```
///
/// The acquisition calls (`lock`, `try_lock`, `try_lock_for`, `with_lock`, ...) are
/// [`LockHandle`]'s, shared with the group locks; the rest is the lock's own.
pub type Lock = LockHandle<RawLock>;

/// The reentrant lock behind a [`Lock`] handle (`pub` in a private module: it names the
/// handle's type, and has nothing to call from outside the crate).
#[derive(Clone)]
pub struct RawLock {
    client: Arc<Client>,
    /// The kind of lock: its keys, scripts and rules.
    kind: Arc<dyn LockKind>,
    /// For the write lock of an upgradable guard: the holder id of the upgradable chain it
    /// upgrades, which must still be the thread's.
    upgrading: Option<Arc<str>>,
    /// How long the lock stays held in Redis after a hold of this handle's ends without a
    /// release (see [`Lock::delayed_after_loss`]); zero: none.
    lock_delay: Duration,
}

/// What one acquisition try came to, and what its answer said beside.
struct Tried {
    acquired: Acquired,
    grant: Granted<'static>,
    /// An upgrade's try id: the grant's, if it is granted.
    upgrade: Option<String>,
}

/// The chain an acquisition joins or starts: its holder id, the levels this process holds
/// of it, whether it is an upgrade (the write lock taken with the holder id of the thread's
/// upgradable chain), and for a reader whose thread holds the write lock, that write
/// chain's holder id (the reader may enter beside it).
#[derive(Clone)]
pub(crate) struct Chain {
    holder: String,
    levels_held: u32,
    upgrade: bool,
    writer: Option<String>,
}

impl Chain {
    fn of(holder: String, levels_held: u32) -> Self {
        Chain {
            holder,
            levels_held,
            upgrade: false,
            writer: None,
        }
    }
}

/// What an acquisition try is for: the chain's holder id and the levels it holds, for an
/// upgrade (the write lock taken by the upgradable reader) the id of this try, so that its
/// undo takes back only its own grant, and its deadline (ms since the epoch on the server's
/// clock; 0 for the tries of a chain given up, whose undo takes the latest deadline then).
#[derive(Clone, Copy)]
struct TryOf<'a> {
    holder: &'a str,
    levels_held: u32,
    upgrade: Option<&'a str>,
    deadline_ms: u64,
}

impl TryOf<'_> {
    /// The script that takes back what this try may have added, sent again until it runs
    /// after `not_before` (the try's deadline, or a later one: see `protocol::undo`).
    fn undo(self, kind: &dyn LockKind, not_before: u64) -> ScriptCall {
        let undo = UndoArgs {
            holder: self.holder,
            levels_held: self.levels_held,
            upgrade: self.upgrade,
            not_before,
        };
        protocol::undo(kind, &undo)
    }
}

/// Why a grant gives no guard.
enum NoGuard {
    /// It came after its lease ran out by the local clock.
    Late,
    /// It joined a chain given up here meanwhile.
    ChainGone,
}

/// A grant's particulars: its fencing token (when taken), when its request was sent, how
/// many replicas acknowledged it (when the manager asks for acknowledgements), and for an
/// upgrade the id of the try granted (the undo of the grant and the chain's releases name
/// it).
#[derive(Clone, Copy)]
struct Granted<'a> {
    token: u64,
    sent_at: Instant,
    acknowledged: Option<u32>,
    upgrade: Option<&'a str>,
}

impl RawAcquire for RawLock {
    type Hold = LockHold;

    fn acquire(&self, terms: Terms<'_>) -> Result<Option<LockGuard>> {
        self.acquire_level(terms, |hold| hold)
    }
}

revocable_handle!(RawLock);

impl RawRevocable for RawLock {
    fn request_revocation(&self) -> Result<usize> {
        self.keys()?;
        let ask = || {
            let deadline_ms = self.client.try_deadline_ms();
            let except = self.upgrading.as_deref();
            let call = protocol::request_revocation(&*self.kind, except, deadline_ms);
            self.client.run_script(&call)
        };
        match ask() {
            // Refused for coming late (the clock's estimate was off, and is read anew): it
            // asked nobody.
            Err(err) if self.client.refused_late(&err) => ask(),
            asked => asked,
        }
    }
}

impl Lock {
    pub(crate) fn plain(client: Arc<Client>, name: &str) -> Self {
        Lock::of_kind(client, Arc::new(Plain::new(name)))
    }

    /// A handle to a lock of the given kind: the plain or fair lock, the read, write or
    /// upgradable lock of a read-write lock, an election's lock.
    pub(crate) fn of_kind(client: Arc<Client>, kind: Arc<dyn LockKind>) -> Self {
        let raw = RawLock {
            client,
            kind,
            upgrading: None,
            lock_delay: Duration::ZERO,
        };
        LockHandle::from_raw(raw, None)
    }

    /// The lock name: the Redis key of the lock.
    pub fn name(&self) -> &str {
        self.raw().name()
    }

    /// Whether anyone holds the lock (for the read or write lock of a read-write lock:
    /// whether it is held in that mode).
    pub fn is_locked(&self) -> Result<bool> {
        let raw = self.raw();
        raw.keys()?;
        raw.kind.is_locked(raw)
    }

    /// Whether the calling thread holds the lock, as this process knows it: taken, not
    /// released, and not known to be lost. No I/O (see [`hold_count`](Lock::hold_count) for
    /// what Redis records).
    pub fn is_held_by_current_thread(&self) -> bool {
        let raw = self.raw();
        raw.keys().is_ok() && raw.current_chain().is_some()
    }

    /// How many times the calling thread holds the lock, as Redis counts it now (0 without
    /// I/O when this process knows of no hold of the thread, or knows it lost it).
    pub fn hold_count(&self) -> Result<u32> {
        let raw = self.raw();
        let name = &raw.keys()?.name;
        let Some((holder, _)) = raw.current_chain() else {
            return Ok(0);
        };
        let field = raw.kind.hold_field(&holder);
        let count: Option<u32> = raw.query(redis::cmd("HGET").arg(name).arg(field))?;
        Ok(count.unwrap_or(0))
    }

    /// The lease the lock has left: `None` when nobody holds it, [`Duration::MAX`] when its
    /// key has no expiry (set by something other than a lock). For a hold with a lock delay
    /// ([`delayed_after_loss`](Self::delayed_after_loss)) the key's, the delay included.
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        let raw = self.raw();
        let millis: i64 = raw.query(redis::cmd("PTTL").arg(&raw.keys()?.name))?;
        Ok(match millis {
            -2 => None,
            -1 => Some(Duration::MAX),
            millis => Some(Duration::from_millis(millis.max(0) as u64)),
        })
    }

    /// Frees the lock whoever holds it, and wakes its waiters (Redisson's `forceUnlock`).
    /// Answers whether it was held. On the read or write lock of a read-write lock, it frees the whole read-write lock:
    /// readers and writer.
    ///
    /// A holder that is a `redlease` manager hears a notice at once and its guard reports
    /// [`LostReason::ForceReleased`](crate::LostReason::ForceReleased); should the notice
    /// miss it (its pub/sub connection was down, or an ACL refuses the notice channel), its
    /// next renewal finds the lock gone; a holder with a fixed lease, which nothing renews,
    /// then only learns at the end of its lease. Its release answers [`Error::NotHeld`].
    pub fn break_lock(&self) -> Result<bool> {
        let raw = self.raw();
        raw.keys()?;
        let name = raw.name();
        let freed: i64 = raw
            .client
            .change(name, |request| protocol::force_release(&*raw.kind, request))?;
        Ok(freed == 1)
    }

    /// Releases one level of the calling thread's hold without a guard: for holds whose guard
    /// was leaked with [`std::mem::forget`], as `lock_api`'s `force_unlock` does (safe here:
    /// it releases only what the calling thread holds). Fails with [`Error::NotHeld`] when
    /// the calling thread does not hold the lock. To free the lock whoever holds it, see
    /// [`break_lock`](Lock::break_lock).
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// let lock = manager.lock("batch");
    /// std::mem::forget(lock.lock()?); // held past this scope, without a guard
    /// assert!(lock.is_held_by_current_thread());
    /// lock.force_unlock()?;
    /// assert!(!lock.is_locked()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn force_unlock(&self) -> Result<()> {
        let raw = self.raw();
        let name = &raw.keys()?.name;
        // A handle's lock delay shapes the release of levels left: checked as an
        // acquisition checks it, before the level is taken from the watchdog.
        raw.check_lock_delay(raw.client.watchdog_timeout_ms())?;
        let watchdog = raw.client.watchdog();
        let thread = names::thread_number();
        let ended = watchdog
            .unwatch_thread(&raw.watch_key(thread), thread)
            .ok_or_else(|| Error::NotHeld { name: name.clone() })?;
        let upgrade = ended.lease.upgrade();
        raw.release(&ended.holder, upgrade, ended.left, None, Release::Waited)
    }

    /// This handle, with a lock delay: once one of its holds is lost without a release (its
    /// holder was killed, paused or cut off until its lease ran out), the lock stays held in
    /// Redis for `delay` more, and nobody else takes it meanwhile; a release, however late,
    /// frees it at once. For a resource that cannot check [fencing
    /// tokens](crate::LockGuard::fencing_token): a holder that lost its lock while paused
    /// may still act on the resource for a while when it wakes, and the delay keeps the next
    /// holder out for that long (Chubby's and Consul's lock-delay).
    ///
    /// The holder trusts only its own lease: its guard's
    /// [`valid_for`](crate::Guard::valid_for), at-risk and lost signals are those of a hold
    /// without a delay. The lock's key carries the lease and the delay as its TTL, renewed
    /// together, so Redisson's clients and [`remaining_ttl`](Self::remaining_ttl) see the
    /// lock held for the delay too. A holder paused past its lease (but not past the delay)
    /// that wakes finds its guard lost ([`LostReason::LeaseExpired`](crate::LostReason)),
    /// and no renewal brings the hold back; but its field is still in Redis: its `unlock()`
    /// frees the lock (and answers `Ok`), and until then its thread's next acquisition waits
    /// behind it like anyone's.
    ///
    /// The delay belongs to the holds taken through this handle, not to the name: other
    /// handles and Redisson's clients take and lose the lock without one. A chain of
    /// reentrant levels keeps the longest delay any of its levels was taken with; a release
    /// that hands the lock to a waiting thread gives it that thread's handle's delay.
    /// `Duration::ZERO` is no delay; a delay is counted in whole milliseconds, rounded up.
    ///
    /// For the lock, the spin lock and the non-reentrant lock. Its acquisitions fail with
    /// [`Error::InvalidArgument`] on other kinds, and when the delay, or the lease and the
    /// delay together, are longer than a lease may be; a group lock refuses a member with a
    /// delay.
    ///
    /// ```
    /// # fn main() -> redlease::Result<()> {
    /// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
    /// # let manager = redlease::LockManager::builder(redis.url()).build()?;
    /// use std::time::Duration;
    ///
    /// let printer = manager.lock("label-printer").delayed_after_loss(Duration::from_secs(10));
    /// let guard = printer.lock()?;
    /// assert!(printer.remaining_ttl()?.unwrap() > manager.watchdog_timeout());
    /// guard.unlock()?; // a release frees it at once
    /// assert!(!printer.is_locked()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn delayed_after_loss(&self, delay: Duration) -> Lock {
        let raw = RawLock {
            lock_delay: delay,
            ..self.raw().clone()
        };
        self.with_raw(raw)
    }
}

impl RawLock {
    /// The lock name: the Redis key of the lock.
    pub(crate) fn name(&self) -> &str {
        &self.kind.keys().name
    }

    pub(crate) fn keys(&self) -> Result<&LockKeys> {
        self.kind.keys().checked()
    }

    /// The keys, for callers that checked them once already.
    pub(crate) fn keys_unchecked(&self) -> &LockKeys {
        self.kind.keys()
    }

    /// The kind of lock: its scripts and rules.
    pub(crate) fn kind(&self) -> &dyn LockKind {
        &*self.kind
    }

    /// The script that takes back what a try of `holder` may have added beyond the
    /// `levels_held` its chain had (for a group's member, whose tries are not upgrades).
    pub(crate) fn undo_of(&self, holder: &str, levels_held: u32) -> ScriptCall {
        let undo = UndoArgs {
            holder,
            levels_held,
            upgrade: None,
            not_before: 0,
        };
        protocol::undo(&*self.kind, &undo)
    }

    /// The client the lock talks to Redis through.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The chain by which the calling thread holds the lock in this process, unless it is
    /// known to be lost: its holder id and levels.
    fn current_chain(&self) -> Option<(Arc<str>, u32)> {
        let thread = names::thread_number();
        let watchdog = self.client.watchdog();
        watchdog.chain_of(&self.watch_key(thread), thread)
    }

    /// The lock delay of this handle's holds (zero: none).
    pub(crate) fn lock_delay(&self) -> Duration {
        self.lock_delay
    }

    /// The lock delay in whole milliseconds, rounded up (a delay past what a lease may be is
    /// refused by each acquisition before anything is sent).
    fn lock_delay_ms(&self) -> u64 {
        let millis = u64::try_from(self.lock_delay.as_millis()).unwrap_or(u64::MAX);
        match Duration::from_millis(millis) < self.lock_delay {
            true => millis.saturating_add(1),
            false => millis,
        }
    }

    /// The TTL of the lock's key for a lease of `lease_ms`: the lease, and the lock delay.
    fn key_ttl_ms(&self, lease_ms: u64) -> u64 {
        lease_ms.saturating_add(self.lock_delay_ms())
    }

    /// How the watchdog renews this handle's holds: as its kind's, with its lock delay.
    fn hold_kind(&self) -> HoldKind {
        match self.kind.hold_kind() {
            HoldKind::Lock { .. } => HoldKind::Lock {
                delay_ms: self.lock_delay_ms(),
            },
            other => other,
        }
    }

    /// Checks a lock delay against the kind and the lease of an acquisition (`lease_ms`).
    fn check_lock_delay(&self, lease_ms: u64) -> Result<()> {
        if self.lock_delay.is_zero() {
            return Ok(());
        }
        if !self.kind.may_delay() {
            return Err(Error::InvalidArgument(format!(
                "lock {:?}: a lock delay is for the lock, the spin lock and the non-reentrant \
                 lock",
                self.name()
            )));
        }
        names::lease_millis("a lock delay", self.lock_delay)?;
        let ttl = Duration::from_millis(self.key_ttl_ms(lease_ms));
        names::lease_millis("a lease with its lock delay", ttl).map(drop)
    }

    /// This write lock, as the upgrade of the upgradable chain `upgrader`: its acquisitions
    /// end with [`Error::LockLost`] once the thread no longer holds that chain, rather than
    /// take the write lock afresh.
    pub(crate) fn upgrading(&self, upgrader: &str) -> RawLock {
        RawLock {
            upgrading: Some(Arc::from(upgrader)),
            ..self.clone()
        }
    }

    /// The holder id of the chain by which the calling thread holds the lock in this
    /// process, unless it is known to be lost.
    pub(crate) fn current_chain_holder(&self) -> Option<Arc<str>> {
        self.current_chain().map(|(holder, _)| holder)
    }

    /// The watchdog's key for `thread`'s chain of this lock (its read levels, for a read
    /// lock).
    pub(crate) fn watch_key(&self, thread: u64) -> String {
        self.kind.watch_key(thread)
    }

    /// The field of the lock's hash that records `holder`'s hold: the holder id, or for a
    /// writer its writer's field.
    pub(crate) fn hold_field<'a>(&self, holder: &'a str) -> std::borrow::Cow<'a, str> {
        self.kind.hold_field(holder)
    }

    /// Runs `command` on the lock's server.
    fn query<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Result<T> {
        self.client
            .run(self.name(), |connection| command.query(connection))
    }

    /// Tries until `deadline` (forever with `None`), in the shared wait loop: subscribed to
    /// the release channel after the first failed attempt and before the next, sleeping until
    /// a release wakes this thread or the holder's lease runs out. `make` makes the guard's
    /// hold of the level taken (a primitive built on the lock wraps it).
    pub(crate) fn acquire_level<H: Hold>(
        &self,
        terms: Terms<'_>,
        make: impl Fn(LockHold) -> H,
    ) -> Result<Option<Guard<H>>> {
        self.client.ensure_running()?;
        self.keys()?;
        self.check_lock_delay(terms.lease.millis_or(self.client.watchdog_timeout_ms()))?;
        let acquisition = Acquisition::new(self, terms, make)?;
        let ask_holders = || self.ask_holders_once();
        let outcome = wait::wait_until(WaitFor {
            name: Some(self.name()),
            deadline: terms.deadline,
            // A lock without expiry can only be freed by a release message (or by hand):
            // look again once per watchdog interval all the same.
            default_hint: self.client.watchdog_timeout() / 3,
            subscribe: || acquisition.subscribe(),
            attempt: || acquisition.attempt(),
            ensure_running: || self.client.ensure_running(),
            cancel: terms.cancel,
            outage_grace: self.client.outage_grace(),
            recorder: self.client.wait_recorder(),
            nudge: terms.revoke_after.map(|after| wait::Nudge {
                after,
                ask: &ask_holders,
            }),
            subscribe_first: acquisition.others_wait(),
        });
        acquisition.end(matches!(outcome, Ok(Some(_))));
        outcome
    }

    /// A waiter's request that the holders let go (see `revoking_after`): answers whether it
    /// is done with, which it is unless an outage kept it from Redis (any other error is
    /// logged and given up).
    fn ask_holders_once(&self) -> bool {
        match self.request_revocation() {
            Ok(_) => true,
            Err(err) if err.is_outage() => {
                log::debug!("lock {:?}: asking the holders failed: {err}", self.name());
                false
            }
            Err(err) => {
                log::warn!("lock {:?}: could not ask the holders: {err}", self.name());
                true
            }
        }
    }

    /// Subscribes the chain of `holder` to what announces a release, as the lock's kind
    /// says (a fair lock's grants are kept in `letters`); to nothing when its waiters poll.
    fn subscribe(
        &self,
        holder: &str,
        letters: &Letterbox,
    ) -> Result<Vec<crate::client::pubsub::Subscription>> {
        if self.kind.polls().is_some() {
            return Ok(Vec::new());
        }
        let pubsub = self.client.pubsub();
        Ok(vec![self.kind.subscribe(pubsub, holder, letters)?])
    }

    /// The chain the calling thread holds the lock by ([`Error::AlreadyHeld`] for a kind that
    /// is not reentrant), or a new one with a holder id of its own, unless the thread's holds
    /// of a kin lock make it another (see [`LockKind::chain_to_join`]).
    fn chain_to_join(&self, thread: u64) -> Result<Chain> {
        if let Some((holder, levels)) = self.current_chain() {
            if !self.kind.reentrant() {
                let name = self.name().to_owned();
                return Err(Error::AlreadyHeld { name });
            }
            return Ok(Chain::of(holder.to_string(), levels));
        }
        let joined = self.kind.chain_to_join(self, thread)?;
        Ok(joined.unwrap_or_else(|| Chain::of(self.client.new_holder_id(), 0)))
    }

    /// One acquisition attempt by `chain` (see [`Chain`]), and when it was sent.
    /// When its answer does not come, its undo is queued behind it: a late grant
    /// is taken back. A grant that too few replicas acknowledged is taken back too, and
    /// answered as an error: a failover now could erase it.
    fn attempt(&self, chain: &Chain, lease: Lease, grants: bool) -> Result<Tried> {
        let (holder, levels_held) = (chain.holder.as_str(), chain.levels_held);
        let lease_ms = self.key_ttl_ms(lease.millis_or(self.client.watchdog_timeout_ms()));
        // An upgrade's try has an id, so that its undo takes back only its own grant.
        let upgrade = chain.upgrade.then(|| self.client.next_request_id());
        let deadline_ms = self.client.try_deadline_ms();
        let this_try = TryOf {
            holder,
            levels_held,
            upgrade: upgrade.as_deref(),
            deadline_ms,
        };
        let args = TryArgs {
            holder,
            levels_held,
            lease_ms,
            upgrade: this_try.upgrade,
            writer: chain.writer.as_deref(),
            accepts_grant: grants,
            deadline_ms,
        };
        let call = protocol::acquire(&*self.kind, &args);
        let sent_at = Instant::now();
        let answer = self.send_try(&call, this_try)?;
        let grant = Granted {
            token: 0,
            sent_at,
            acknowledged: answer.acknowledged,
            upgrade: None,
        };
        Ok(Tried {
            acquired: answer.answer,
            grant,
            upgrade,
        })
    }

    /// Sends the script `call` of `this_try`, with its undo queued right behind it on the
    /// same connection, and takes back what it may have added when its answer does not come
    /// or too few replicas acknowledged it.
    ///
    /// A try of a reentrant level is not undone here: it sets the chain's count (a repeat or
    /// a later try of the same level sets the same), and the wait takes the level back once,
    /// if it ends without it (an undo racing a later try would take that one).
    fn send_try(&self, call: &ScriptCall, this_try: TryOf<'_>) -> Result<Acked<Acquired>> {
        let reentrant = this_try.levels_held > 0;
        let answer = self
            .client
            .run_acknowledged::<Acquired>(call, |connection| {
                if reentrant {
                    return;
                }
                // The request may still run: queue its undo right behind it, on the same
                // connection, so it runs after it and before any later request of ours.
                let undo = this_try.undo(&*self.kind, this_try.deadline_ms);
                let undo = self.client.in_dialect(undo);
                let _ = connection.send_packed_command(&undo.as_eval().get_packed_command());
            });
        match answer {
            Err(err) if err.may_have_run() => {
                // The connection broke, or no answer came, after the request went out: it
                // may have run.
                if !reentrant {
                    self.take_back(this_try, &err, Undoing::Later);
                }
                Err(err)
            }
            Ok(Acked {
                answer: Acquired::Taken { .. },
                unreplicated: Some(why),
                ..
            }) => {
                if !reentrant {
                    self.take_back(this_try, &why, Undoing::Now);
                }
                Err(why.into_error(self.name()))
            }
            answer => answer,
        }
    }

    /// Takes back what the acquisition try `this_try` may have added beyond the levels its
    /// chain had, and its place in a fair lock's queue, after `cause`. Unanswered, the undo
    /// is sent again by the cleanup thread until the server answers, or until the place and
    /// the lease it asked for would have run out by themselves; answered before the deadline
    /// of every try of the chain made so far has passed (a copy of one may still come), once
    /// more after it. A reentrant level's undo is sent until answered only.
    fn take_back(&self, this_try: TryOf<'_>, cause: &dyn fmt::Display, when: Undoing) {
        let holder = this_try.holder;
        let client = &self.client;
        let place = self.kind.queue_place().unwrap_or(Duration::ZERO);
        // Sent again until no copy of a try of the chain can come any more; a reentrant
        // level's undo once (a later try of the same level sets the same count: a resend
        // would take that one back).
        let not_before = match this_try.levels_held {
            0 => this_try.deadline_ms.max(client.try_deadline_ms()),
            _ => 0,
        };
        let until = Instant::now()
            + place.max(client.watchdog_timeout())
            + self.lock_delay
            + client.outage_grace();
        client.undo(
            when,
            || {
                format!(
                    "lock {:?}: undo of {holder}'s try after {cause}",
                    self.name()
                )
            },
            this_try.undo(&*self.kind, not_before),
            until.max(client.past(not_before)),
        );
    }

    /// The guard of a level granted to `holder` (`joins`: of a chain it holds already); none
    /// when that chain was given up meanwhile, or when the grant of a new chain came so late
    /// that its lease had run out by the local clock (a slow network, a frozen master): such
    /// a guard would be lost the moment it is handed out.
    fn guard<H: Hold>(
        &self,
        holder: String,
        joins: bool,
        lease: Lease,
        grant: Granted<'_>,
        cancel: Option<&CancelToken>,
        make: impl Fn(LockHold) -> H,
    ) -> std::result::Result<Guard<H>, NoGuard> {
        let Granted {
            token,
            sent_at,
            acknowledged,
            upgrade,
        } = grant;
        let fixed_lease = lease.fixed_duration();
        let lease_length = fixed_lease.unwrap_or_else(|| self.client.watchdog_timeout());
        if !joins && lease::deadline(sent_at, lease_length) <= Instant::now() {
            log::debug!(
                "lock {:?}: a grant came after its lease ran out; giving it back",
                self.name()
            );
            return Err(NoGuard::Late);
        }
        let thread = names::thread_number();
        let watch_key = self.watch_key(thread);
        let holding = Holding {
            key: &watch_key,
            name: self.name(),
            holder: &holder,
            kind: self.hold_kind(),
            thread,
        };
        let grant = Grant {
            token,
            joins,
            upgrade,
        };
        let (state, token) = self
            .client
            .watchdog()
            .watch(holding, grant, sent_at, fixed_lease)
            .ok_or(NoGuard::ChainGone)?;
        let hold = LockHold {
            lock: LockHandle::from_raw(self.clone(), cancel.cloned()),
            holder,
            token,
            acknowledged,
            watched: Watched::new(watch_key, &state, fixed_lease),
        };
        Ok(Guard::from_hold(make(hold), state))
    }

    /// Takes back the hold of a chain this process has given up, and its place in a fair
    /// lock's queue.
    pub(super) fn undo_given_up(&self, holder: &str, upgrade: Option<&str>) {
        let given_up = TryOf {
            holder,
            levels_held: 0,
            upgrade,
            deadline_ms: 0,
        };
        self.take_back(given_up, &"giving the chain up", Undoing::Now);
    }

    /// Releases one level held by `holder` (a chain's holder id; for an upgrade's chain, of
    /// the grant to the try `upgrade`), leaving the chain the levels `left` in this
    /// process. Remaining levels get the watchdog timeout as their lease while the watchdog
    /// renews them, else the lease of the level released. A plain lock's last level is
    /// handed to a thread of this manager that waits for it, if one does and the bound on
    /// handoffs in a row allows (see [`wait::line`](crate::client::wait::line)).
    pub(crate) fn release(
        &self,
        holder: &str,
        upgrade: Option<&str>,
        left: LevelsLeft,
        fixed_lease: Option<Duration>,
        how: Release,
    ) -> Result<()> {
        let client = &self.client;
        let lease_ms = match fixed_lease {
            Some(lease) if !left.is_watched() => names::lease_millis("lease", lease)?,
            _ => client.watchdog_timeout_ms(),
        };
        let receipt = self
            .keys_unchecked()
            .release_receipt(&client.next_request_id());
        let offer = match left.total() {
            0 => self.handoff_offer(),
            _ => None,
        };
        let levels = left.total();
        let key_ttl_ms = self.key_ttl_ms(lease_ms);
        let (call, again) = self.release_calls(
            holder,
            upgrade,
            levels,
            key_ttl_ms,
            &receipt,
            offer.as_ref(),
        );
        // The receipt makes a repeated request answer like the first, should the first have
        // been carried out before its connection broke.
        let until = || Instant::now() + Duration::from_millis(key_ttl_ms);
        let sent_at = Instant::now();
        let answer =
            client.release::<redis::Value>(self.name(), call, again.clone(), receipt, how, until);
        if let (Some(offer), Some(again)) = (offer, again) {
            self.settle_offer(offer, &answer, sent_at, again);
        }
        self.settle_release(levels, answer?)
    }

    /// The script call that releases a level of `holder`'s hold (of the grant to the try
    /// `upgrade`, for an upgrade) with `levels` left after it, under `receipt`, handing the
    /// lock to `offer`'s waiter when there is one; for a handoff, also its repeat without it
    /// (see `Client::release`).
    fn release_calls(
        &self,
        holder: &str,
        upgrade: Option<&str>,
        levels: u32,
        lease_ms: u64,
        receipt: &str,
        offer: Option<&Offer>,
    ) -> (ScriptCall, Option<ScriptCall>) {
        // Copies of the release are sent through an outage, by the cleanup thread until the
        // lease would have run out (a dropped guard's), and after a handoff, once the release
        // is settled, until the handed lease and an outage grace have gone by (see
        // `settle_offer`).
        let longest_lease = offer.map_or(lease_ms, |offer| lease_ms.max(offer.lease_ms()));
        let send_for = Duration::from_millis(longest_lease) + self.client.outage_grace() * 2;
        let window = self.client.release_window(send_for);
        let release = |handing: protocol::Handing<'_>| {
            let release = ReleaseArgs {
                receipt,
                holder,
                lease_ms,
                window,
                levels_left: levels,
                handing,
                upgrade,
            };
            protocol::release(&*self.kind, &release)
        };
        let plain = release(protocol::Handing::No);
        match offer {
            Some(offer) => {
                let holder = offer.holder();
                let lease_ms = offer.lease_ms();
                let handing = protocol::Handing::To { holder, lease_ms };
                (release(handing), Some(plain))
            }
            None => (plain, None),
        }
    }

    /// Settles a release by its answer (`levels` left after it): the count of handoffs in a
    /// row starts again when the chain's hold ended without one; [`Error::NotHeld`] when
    /// there was nothing to release; a release short of acknowledgements stands, and is
    /// counted.
    fn settle_release(&self, levels: u32, acked: Acked<redis::Value>) -> Result<()> {
        if levels == 0 && protocol::handed(&acked.answer).is_none() {
            // The chain's hold ended without a handoff (freed, or found gone): the count of
            // handoffs in a row starts again.
            self.client.handoffs().freed(self.name());
        }
        if !protocol::released(&acked.answer) {
            return Err(Error::NotHeld {
                name: self.name().to_owned(),
            });
        }
        // Released on the master, which is what the caller's hold was: it stands.
        if let Some(why) = acked.unreplicated {
            self.client.release_unreplicated(self.name(), &why);
        }
        Ok(())
    }
}

impl std::fmt::Debug for RawLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut lock = f.debug_struct("Lock");
        lock.field("name", &self.name());
        if !self.lock_delay.is_zero() {
            lock.field("lock_delay", &self.lock_delay);
        }
        lock.finish()
    }
}

/// Whether an acquisition that failed with `err` may have its undo arrive late: it may have
/// run, or its grant was taken back for want of replica acknowledgements.
fn undo_may_come_late(err: &Error) -> bool {
    err.may_have_run() || err.is_ack_shortfall()
}
