//! Locks over several Redis servers: [`RedLock`] (a majority of independent masters) and
//! [`MultiLock`] (every one of several locks), both held through a [`GroupGuard`].
//!
//! Either is a group of [`Lock`] handles, each on its own manager, of which `required` must
//! be taken. An attempt (`attempt.rs`) sends the acquire script to the members at once and
//! reads the answers against one attempt timeout ([`fanout`](crate::client::fanout): about one round
//! trip, not one per server), without waiting for members that went silent or for answers
//! that can no longer change the outcome; what it must not keep is undone. It succeeds with
//! `required` members taken and time left of the lease: the validity, lease − elapsed −
//! drift (1 % of the lease + 2 ms), elapsed by the monotonic clock. Otherwise the shared wait
//! loop tries again after a jittered delay, or as soon as a release message arrives on any
//! member's channel.
//!
//! Each member taken is then kept by its own manager's watchdog, like a single lock; the
//! group is lost when fewer than `required` members are still held. Reentrancy is counted
//! here, per thread, without I/O.
//!
//! Replica acknowledgements are each member's own: a member whose manager waits for replicas
//! (by default, those its master has in sync) waits for them on its
//! acquisitions, token raises and releases, as a single lock of that manager does (its
//! renewals are its watchdog's already); the others do not.
//!
//! This module may use the members' clients (pools, hubs, watchdogs) and the protocol's lock
//! scripts; it keeps no thread of its own.

mod attempt;
mod group_guard;

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use group_guard::GroupGuard;
use group_guard::{Chain, GroupHold};

use crate::client::call::replication::Acked;
use crate::client::fanout::{self, Request};
use crate::client::wait::{self, WaitFor};
use crate::client::watchdog::lease::clock_drift;
use crate::error::{Error, LostReason, Result};
use crate::manager::LockManager;
use crate::primitives::hold::handle::{Lease, LockHandle, RawAcquire, Terms};
use crate::primitives::lock::Lock;
use crate::protocol::group as group_protocol;
use crate::protocol::lock as protocol;
use crate::protocol::names;

use crate::client::watchdog::LevelsLeft;

/// The delay between two attempts after a split vote, before jitter.
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// A lock taken on a majority of independent Redis masters (the Redlock algorithm), so that
/// no single server is a point of failure. Cheap to clone; `Send` and `Sync`.
///
/// Build it from one [`Lock`] handle per master, each from its own [`LockManager`]
/// ([`RedLock::new`], [`RedLock::builder`]), from managers and a name
/// ([`RedLock::from_managers`]), or from URLs ([`RedLock::from_urls`]). With N masters it
/// needs N / 2 + 1 of them. The guard, reentrancy, watchdog, lost-lock signal and fencing
/// token work as for a single [`Lock`]; the lock is lost when fewer than a majority of its
/// members are still held.
///
/// Reentrancy is counted in the process, per handle (and its clones) and thread: a
/// reentrant level keeps the lease of the first one. Members are told apart by their
/// managers' URLs, so give each master one spelling (`localhost` and `127.0.0.1` would
/// pass as two).
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let servers: Vec<_> = (0..3)
/// #     .map(|_| redlease_testing::RedisServer::start().expect("redis-server"))
/// #     .collect();
/// # let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
/// let lock = redlease::RedLock::from_urls(&urls, "nightly-billing")?;
/// assert_eq!(lock.required(), 2);
/// let guard = lock.lock()?;
/// // ... a majority of the masters hold it for this thread ...
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
///
/// The acquisition calls (`lock`, `try_lock`, `try_lock_for`, `with_lock`, ...) are
/// [`LockHandle`]'s, shared with [`Lock`] and [`MultiLock`]: a try is one attempt (one round
/// trip to every server); a wait fails when too few servers answer
/// ([`Error::NoQuorum`]).
pub type RedLock = LockHandle<RawGroup<Majority>>;

/// Several locks taken together, all or nothing: for work that needs several resources at
/// once. Cheap to clone; `Send` and `Sync`.
///
/// The locks may live on one server or on several. An attempt asks for all of them at once;
/// if any is held elsewhere, it releases those it got and waits, so two `MultiLock`s over
/// overlapping sets never deadlock on each other.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// let accounts = redlease::MultiLock::new([
///     manager.lock("account:17"),
///     manager.lock("account:42"),
/// ])?;
/// let guard = accounts.lock()?;
/// // ... move money between the two accounts ...
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
///
/// The acquisition calls (`lock`, `try_lock`, `try_lock_for`, `with_lock`, ...) are
/// [`LockHandle`]'s, shared with [`Lock`] and [`RedLock`].
pub type MultiLock = LockHandle<RawGroup<All>>;

/// The group lock behind a [`RedLock`] or [`MultiLock`] handle (`pub` in a private module:
/// it names the handle's type, and has nothing to call from outside the crate).
pub struct RawGroup<K> {
    group: Arc<Group>,
    _kind: PhantomData<K>,
}

/// The kind of a [`RedLock`]: a majority of its members.
pub enum Majority {}

/// The kind of a [`MultiLock`]: all of its members.
pub enum All {}

/// What a group lock's kind decides.
pub trait GroupKind {
    /// How the kind is named in errors and `Debug`.
    const KIND: Kind;
}

impl GroupKind for Majority {
    const KIND: Kind = Kind::RedLock;
}

impl GroupKind for All {
    const KIND: Kind = Kind::MultiLock;
}

/// Configures a [`RedLock`] or a [`MultiLock`]; see [`RedLock::builder`] and
/// [`MultiLock::builder`].
#[must_use]
pub struct GroupBuilder<T> {
    kind: Kind,
    members: Vec<Lock>,
    attempt_timeout: Option<Duration>,
    retry_delay: Duration,
    _builds: PhantomData<T>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    RedLock,
    MultiLock,
}

/// The shared state of a group lock (not nameable outside the crate).
pub struct Group {
    members: Vec<Lock>,
    required: usize,
    attempt_timeout: Duration,
    retry_delay: Duration,
    /// The chain this group is held by, per thread number.
    holds: Mutex<HashMap<u64, Arc<Chain>>>,
    /// Per member: `None` while it answers in time; once it did not, when it was last asked.
    silence: Vec<Mutex<Option<Instant>>>,
}

impl RedLock {
    /// A Redlock over `locks`, one per master (a majority of them must be taken), with the
    /// default timing.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] with no lock, or two locks on the same server.
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<Self> {
        Self::builder(locks).build()
    }

    /// Starts configuring a Redlock over `locks`, one per master.
    pub fn builder(locks: impl IntoIterator<Item = Lock>) -> GroupBuilder<RedLock> {
        GroupBuilder::new(Kind::RedLock, locks)
    }

    /// A Redlock on the lock `name` of each manager (one manager per master).
    pub fn from_managers(managers: &[LockManager], name: &str) -> Result<Self> {
        Self::new(managers.iter().map(|manager| manager.lock(name)))
    }

    /// A Redlock on the lock `name` of each server in `urls`, each through a manager of its
    /// own with the default settings (see [`LockManager::builder`] for others). Every server
    /// must answer now: building a manager checks it (build the managers yourself and use
    /// [`RedLock::from_managers`] to start with some down).
    ///
    /// # Errors
    /// As [`LockManagerBuilder::build`](crate::LockManagerBuilder::build) for a server that
    /// cannot be reached or a bad URL, and as [`RedLock::new`].
    pub fn from_urls(urls: &[impl AsRef<str>], name: &str) -> Result<Self> {
        let managers = urls
            .iter()
            .map(|url| LockManager::builder(url.as_ref()).build())
            .collect::<Result<Vec<_>>>()?;
        Self::from_managers(&managers, name)
    }
}

impl MultiLock {
    /// A lock on all of `locks` at once, with the default timing.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] with no lock, or the same lock twice.
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<Self> {
        Self::builder(locks).build()
    }

    /// Starts configuring a lock on all of `locks`.
    pub fn builder(locks: impl IntoIterator<Item = Lock>) -> GroupBuilder<MultiLock> {
        GroupBuilder::new(Kind::MultiLock, locks)
    }
}

impl<K> Clone for RawGroup<K> {
    fn clone(&self) -> Self {
        RawGroup {
            group: Arc::clone(&self.group),
            _kind: PhantomData,
        }
    }
}

impl<K: GroupKind> RawAcquire for RawGroup<K> {
    type Hold = GroupHold;

    fn acquire(&self, terms: Terms<'_>) -> Result<Option<GroupGuard>> {
        self.group.acquire(terms)
    }
}

impl<K: GroupKind> LockHandle<RawGroup<K>> {
    /// Whether the calling thread holds the lock, as this process knows it: taken, not
    /// released, and not known to be lost. No I/O.
    pub fn is_held_by_current_thread(&self) -> bool {
        self.raw().group.is_held_by_current_thread()
    }

    /// The lock handles the lock is made of.
    pub fn members(&self) -> &[Lock] {
        &self.raw().group.members
    }

    /// How many members an acquisition must take.
    pub fn required(&self) -> usize {
        self.raw().group.required
    }
}

impl<K: GroupKind> std::fmt::Debug for RawGroup<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(match K::KIND {
            Kind::RedLock => "RedLock",
            Kind::MultiLock => "MultiLock",
        })
        .field("members", &self.group.members)
        .field("required", &self.group.required)
        .finish()
    }
}

/// What a [`GroupBuilder`] builds: [`RedLock`] or [`MultiLock`] (sealed).
pub trait FromGroup: sealed::Sealed {}

impl<K: GroupKind> FromGroup for LockHandle<RawGroup<K>> {}

mod sealed {
    use std::marker::PhantomData;
    use std::sync::Arc;

    use super::{GroupKind, LockHandle, RawGroup};

    pub trait Sealed: Sized {
        fn from_group(group: Arc<super::Group>) -> Self;
    }

    impl<K: GroupKind> Sealed for LockHandle<RawGroup<K>> {
        fn from_group(group: Arc<super::Group>) -> Self {
            let raw = RawGroup {
                group,
                _kind: PhantomData,
            };
            LockHandle::from_raw(raw, None)
        }
    }
}

impl<T: FromGroup> GroupBuilder<T> {
    fn new(kind: Kind, locks: impl IntoIterator<Item = Lock>) -> Self {
        GroupBuilder {
            kind,
            members: locks.into_iter().collect(),
            attempt_timeout: None,
            retry_delay: DEFAULT_RETRY_DELAY,
            _builds: PhantomData,
        }
    }

    /// The longest one attempt waits for the servers' answers (default: the shortest
    /// response timeout of the members' managers). Keep it small against the lease: time
    /// spent here is taken off the validity.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// The delay before another attempt after a split vote (default 50 ms); each wait is
    /// drawn at random between half and one and a half of it.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Checks the members and settings.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] with no member, two members on the same server (a
    /// Redlock) or the same lock twice (a multi-lock), more members on one server than its
    /// manager's [`max_connections`](crate::LockManagerBuilder::max_connections) (an attempt
    /// needs a connection per member at once), a member that is not a plain lock (a fair,
    /// read, write, spin or non-reentrant lock) or has a lock delay, an empty lock name, or a
    /// zero or too long timeout or delay.
    pub fn build(self) -> Result<T> {
        let GroupBuilder {
            kind,
            members,
            attempt_timeout,
            retry_delay,
            ..
        } = self;
        if members.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "a {kind:?} needs at least one lock"
            )));
        }
        let mut seen = HashSet::new();
        for member in &members {
            check_member(kind, member)?;
            let server = member.raw().client().router().server_of(member.name());
            let identity = match kind {
                Kind::RedLock => server.clone(),
                Kind::MultiLock => format!("{server} {}", member.name()),
            };
            if !seen.insert(identity) {
                return Err(Error::InvalidArgument(match kind {
                    Kind::RedLock => format!("two masters of a RedLock are the same server ({server}): each master must be a server of its own"),
                    Kind::MultiLock => format!("lock {:?} on {server} is in the MultiLock twice", member.name()),
                }));
            }
        }
        check_connection_bounds(&members)?;
        let attempt_timeout = attempt_timeout.unwrap_or_else(|| {
            members
                .iter()
                .map(|member| member.raw().client().router().response_timeout())
                .min()
                .unwrap_or(Duration::from_secs(1))
        });
        names::lease_millis("attempt timeout", attempt_timeout)?;
        names::lease_millis("retry delay", retry_delay)?;
        let required = match kind {
            Kind::RedLock => members.len() / 2 + 1,
            Kind::MultiLock => members.len(),
        };
        Ok(T::from_group(Arc::new(Group {
            required,
            attempt_timeout,
            retry_delay,
            holds: Mutex::new(HashMap::new()),
            silence: members.iter().map(|_| Mutex::new(None)).collect(),
            members,
        })))
    }
}

/// Refuses a member that a group of `kind` cannot take: an empty name, a lock delay, a kind
/// other than the plain lock.
fn check_member(kind: Kind, member: &Lock) -> Result<()> {
    member.raw().keys()?;
    if !member.raw().lock_delay().is_zero() {
        return Err(Error::InvalidArgument(format!(
            "a {kind:?} takes its members' locks without their lock delay; {:?} has one",
            member.name()
        )));
    }
    if !member.raw().kind().may_join_groups() {
        return Err(Error::InvalidArgument(format!(
            "a {kind:?} is made of plain locks; {:?} is of another kind (fair, read, write, \
             spin or non-reentrant)",
            member.name()
        )));
    }
    Ok(())
}

/// Refuses a group whose members on one server (through one manager) outnumber the
/// connections that manager may open to it: an attempt sends to every member at once, one
/// connection each, and could never be made.
fn check_connection_bounds(members: &[Lock]) -> Result<()> {
    let mut per_pool: HashMap<*const crate::client::topology::pool::Pool, usize> = HashMap::new();
    for member in members {
        let pool = member.raw().client().pool_for(member.name());
        let needed = per_pool.entry(Arc::as_ptr(&pool)).or_default();
        *needed += 1;
        if *needed > pool.max_open() {
            return Err(Error::InvalidArgument(format!(
                "the group has more than {} members on {}, which its manager may open \
                 connections to at once (max_connections): an attempt needs one per member",
                pool.max_open(),
                pool.server()
            )));
        }
    }
    Ok(())
}

impl Group {
    /// The name to report in errors: the lock name, or the names joined when they differ.
    fn label(&self) -> String {
        let first = self.members[0].name();
        if self.members.iter().all(|member| member.name() == first) {
            first.to_owned()
        } else {
            let names: Vec<&str> = self.members.iter().map(Lock::name).collect();
            names.join("+")
        }
    }

    fn is_held_by_current_thread(&self) -> bool {
        self.holds
            .lock()
            .get(&names::thread_number())
            .is_some_and(|chain| !chain.is_lost())
    }

    /// The lease each member is asked for, in ms: its manager's watchdog timeout, or the
    /// fixed lease (checked against the clock drift it must allow for).
    fn lease_ms(&self, lease: Lease) -> Result<Vec<u64>> {
        Ok(match lease {
            Lease::Watchdog => self
                .members
                .iter()
                .map(|member| member.raw().client().watchdog_timeout_ms())
                .collect(),
            Lease::Fixed { duration, .. } => {
                if duration <= clock_drift(duration) {
                    return Err(Error::InvalidArgument(format!(
                        "lease of {duration:?} is shorter than the clock drift it must allow for"
                    )));
                }
                vec![names::lease_millis("lease", duration)?; self.members.len()]
            }
        })
    }

    fn acquire(self: &Arc<Self>, terms: Terms<'_>) -> Result<Option<GroupGuard>> {
        let (deadline, lease, cancel) = (terms.deadline, terms.lease, terms.cancel);
        for member in &self.members {
            member.raw().client().ensure_running()?;
        }
        let thread = names::thread_number();
        if let Some(chain) = self.holds.lock().get(&thread) {
            if !chain.is_lost() {
                chain.enter();
                return Ok(Some(GroupGuard::new(Arc::clone(self), Arc::clone(chain))));
            }
        }
        let lease_ms = self.lease_ms(lease)?;
        let shortest_lease = Duration::from_millis(lease_ms.iter().copied().min().unwrap_or(0));
        let label = self.label();
        wait::wait_until(WaitFor {
            name: Some(&label),
            deadline,
            default_hint: self.retry_delay,
            // Members that answer will carry the release message too: a silent one would
            // only hold up the subscription until its response timeout.
            subscribe: || {
                let mut subscriptions = Vec::new();
                for (member, silence) in self.members.iter().zip(&self.silence) {
                    if silence.lock().is_none() {
                        let pubsub = member.raw().client().pubsub();
                        let keys = member.raw().keys_unchecked();
                        subscriptions.push(pubsub.subscribe(&keys.channel, &keys.name)?);
                    }
                }
                Ok(subscriptions)
            },
            attempt: || self.attempt_once(thread, &lease_ms, shortest_lease, lease),
            ensure_running: || {
                self.members
                    .iter()
                    .try_for_each(|member| member.raw().client().ensure_running())
            },
            cancel,
            // A group's waits count on its first member's manager.
            // Independent masters: an outage of some is what the quorum is for.
            outage_grace: Duration::ZERO,
            recorder: self.members[0].raw().client().wait_recorder(),
            nudge: None,
            subscribe_first: false,
        })
    }

    /// Releases one level of `holders`' chains on the members given the levels they keep in
    /// `which`, all at once.
    /// Answers each member's outcome (`None` where not asked): `Ok(true)` released,
    /// `Ok(false)` not held.
    fn release_members(
        &self,
        holders: &[String],
        lease_ms: &[u64],
        which: &[Option<LevelsLeft>],
    ) -> Vec<Option<Result<bool>>> {
        let asked: Vec<(usize, LevelsLeft)> = which
            .iter()
            .enumerate()
            .filter_map(|(index, left)| Some((index, (*left)?)))
            .collect();
        let receipts: Vec<String> = asked
            .iter()
            .map(|&(index, _)| {
                let member = self.members[index].raw();
                member
                    .keys_unchecked()
                    .release_receipt(&member.client().next_request_id())
            })
            .collect();
        let requests = self.release_requests(&asked, &receipts, holders, lease_ms);
        let mut outcomes: Vec<Option<Result<bool>>> =
            (0..self.members.len()).map(|_| None).collect();
        if requests.is_empty() {
            return outcomes;
        }
        let deadline = Instant::now() + self.attempt_timeout;
        let answers = fanout::call_all(&requests, deadline);
        let sent = requests.iter().map(|request| request.call.sent_once());
        for ((((index, _), receipt), answer), sent_once) in
            asked.into_iter().zip(receipts).zip(answers).zip(sent)
        {
            let released =
                answer.map(|acked| self.settle_release(index, receipt, acked, sent_once));
            outcomes[index] = Some(released);
        }
        outcomes
    }

    /// The release requests of the members `asked` (with the levels each keeps), under their
    /// `receipts`.
    fn release_requests(
        &self,
        asked: &[(usize, LevelsLeft)],
        receipts: &[String],
        holders: &[String],
        lease_ms: &[u64],
    ) -> Vec<Request<'_>> {
        asked
            .iter()
            .zip(receipts)
            .map(|(&(index, left), receipt)| {
                let member = self.members[index].raw();
                let release = protocol::ReleaseArgs {
                    receipt,
                    holder: &holders[index],
                    lease_ms: lease_ms[index],
                    window: member.client().release_window(self.attempt_timeout),
                    levels_left: left.total(),
                    handing: protocol::Handing::No,
                    // A member's tries are not upgrades.
                    upgrade: None,
                };
                let call = protocol::release(member.kind(), &release);
                Request::new(member.client(), call.counting_sends())
            })
            .collect()
    }

    /// Settles the answered release of the member at `index`: whether it released. Its
    /// receipt goes at once when the release was sent once (another copy on its way keeps it
    /// until after the release's deadline); one short of acknowledgements stands, and is
    /// counted.
    fn settle_release(
        &self,
        index: usize,
        receipt: String,
        acked: Acked<redis::Value>,
        sent_once: bool,
    ) -> bool {
        let member = &self.members[index];
        if sent_once {
            member.raw().client().watchdog().discard_receipt(receipt);
        }
        let released = protocol::released(&acked.answer);
        if let (true, Some(why)) = (released, acked.unreplicated) {
            member
                .raw()
                .client()
                .release_unreplicated(member.name(), &why);
        }
        released
    }

    /// Ends the thread's hold of `chain`: releases the members it still holds.
    ///
    /// Members it lost are left alone: their keys are gone, or someone else's, or this
    /// thread's again through a newer chain.
    fn release(&self, chain: &Chain) -> Result<()> {
        let lease_ms: Vec<u64> = self
            .members
            .iter()
            .map(|member| match chain.fixed {
                Some(lease) => names::lease_millis("lease", lease).unwrap_or(1),
                None => member.raw().client().watchdog_timeout_ms(),
            })
            .collect();
        let releases: Vec<Option<LevelsLeft>> = self
            .members
            .iter()
            .zip(&chain.members)
            .map(|(member, hold)| {
                let hold = hold.as_ref()?;
                let watchdog = member.raw().client().watchdog();
                let key = member.raw().watch_key(names::thread_number());
                let left = watchdog.unwatch(&key, &hold.lease, chain.fixed.is_some());
                hold.lease.lost().is_none().then_some(left)
            })
            .collect();
        let outcomes = self.release_members(&chain.holders, &lease_ms, &releases);
        let count = |wanted: fn(&Result<bool>) -> bool| {
            outcomes
                .iter()
                .flatten()
                .filter(|outcome| wanted(outcome))
                .count()
        };
        let released = count(|outcome| matches!(outcome, Ok(true)));
        let unanswered = count(|outcome| outcome.is_err());
        self.judge(released, unanswered, || Error::NotHeld {
            name: self.label(),
        })
    }

    /// `Ok` when `succeeded` members are a quorum; [`Error::NoQuorum`] when the `unanswered`
    /// ones could have made it one (too few answers to tell); else the error of `not_held`.
    fn judge(
        &self,
        succeeded: usize,
        unanswered: usize,
        not_held: impl FnOnce() -> Error,
    ) -> Result<()> {
        if succeeded >= self.required {
            Ok(())
        } else if succeeded + unanswered >= self.required {
            Err(Error::NoQuorum {
                reachable: self.members.len() - unanswered,
                required: self.required,
                masters: self.members.len(),
            })
        } else {
            Err(not_held())
        }
    }

    /// Raises the token counters of the members `chain` holds to `token`.
    ///
    /// # Errors
    /// [`Error::LockLost`] when too few members still hold the lock, [`Error::NoQuorum`]
    /// when too few answered to tell.
    fn raise_token(&self, chain: &Chain, token: u64) -> Result<()> {
        let requests: Vec<Request<'_>> = self
            .members
            .iter()
            .zip(&chain.holders)
            .zip(&chain.members)
            .filter(|(_, hold)| hold.is_some())
            // With the manager's acknowledgements: a raise a failover could roll back would
            // let a later holder's token fall below this one.
            .map(|((member, holder), _)| {
                Request::new(
                    member.raw().client(),
                    group_protocol::raise_token(member.raw().keys_unchecked(), holder, token),
                )
            })
            .collect();
        let deadline = Instant::now() + self.attempt_timeout;
        let answers = fanout::call_all(&requests, deadline);
        let raised = answers
            .iter()
            .filter(|answer| {
                matches!(
                    answer,
                    Ok(Acked {
                        answer: redis::Value::Int(1),
                        unreplicated: None,
                        ..
                    })
                )
            })
            .count();
        // A raise too few replicas acknowledged may or may not last: as good as no answer.
        let unanswered = answers
            .iter()
            .filter(|answer| {
                matches!(
                    answer,
                    Err(_)
                        | Ok(Acked {
                            unreplicated: Some(_),
                            ..
                        })
                )
            })
            .count();
        self.judge(raised, unanswered, || Error::LockLost {
            name: self.label(),
            reason: LostReason::NotHeldAnymore,
        })
    }
}
