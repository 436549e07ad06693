//! Locks over several Redis servers: [`RedLock`] (a majority of independent masters) and
//! [`MultiLock`] (every one of several locks), both held through a [`GroupGuard`].
//!
//! Either is a group of [`Lock`] handles, each on its own manager, of which `required` must
//! be taken. An attempt sends the acquire script to every member at once and reads the
//! answers against one attempt timeout ([`fanout`](crate::fanout): about one round trip, not
//! one per server). Members that did not answer their last request in time are read last,
//! and only briefly when the others could make the quorum on their own; once the answers in
//! hand settle the vote, the rest are not waited for: an undo is queued behind each on its
//! connection, so a late grant is taken back as soon as it is made. While the others can make
//! the quorum alone, a silent member is asked only once a second (a probe): every request to a
//! frozen server leaves a connection in its accept queue. An attempt succeeds with
//! `required` members taken and time left of the lease: the validity, lease − elapsed −
//! drift (1 % of the lease + 2 ms), elapsed by the monotonic clock. Otherwise it undoes what
//! it took and tries again after a jittered delay, or as soon as a release message arrives
//! on any member's channel.
//!
//! Each member taken is then kept by its own manager's watchdog, like a single lock; the
//! group is lost when fewer than `required` members are still held. Reentrancy is counted
//! here, per thread, without I/O. This module may use the members' clients (pools, hubs,
//! watchdogs) and the lock scripts; it keeps no thread of its own.

mod guard;

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use guard::GroupGuard;
use guard::{Chain, MemberHold};

use crate::error::{Error, LostReason, Result};
use crate::fanout::{self, FanOut, Request};
use crate::lease::clock_drift;
use crate::lock::{deadline_after, Lock};
use crate::manager::LockManager;
use crate::protocol::group as group_protocol;
use crate::protocol::lock::{self as protocol, Acquired};
use crate::protocol::names;
use crate::wait::{self, WaitFor};
use crate::watchdog::{Grant, LevelsLeft};

/// The delay between two attempts after a split vote, before jitter.
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);
/// How often a member that stopped answering is asked again while the others can make the
/// quorum without it.
const SILENT_PROBE_INTERVAL: Duration = Duration::from_secs(1);

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
/// #     .map(|_| redlease::testing::RedisServer::start().expect("redis-server"))
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
#[derive(Clone)]
pub struct RedLock {
    group: Arc<Group>,
}

/// Several locks taken together, all or nothing: for work that needs several resources at
/// once. Cheap to clone; `Send` and `Sync`.
///
/// The locks may live on one server or on several. An attempt asks for all of them at once;
/// if any is held elsewhere, it releases those it got and waits, so two `MultiLock`s over
/// overlapping sets never deadlock on each other.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease::testing::RedisServer::start().expect("redis-server");
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
#[derive(Clone)]
pub struct MultiLock {
    group: Arc<Group>,
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
enum Kind {
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

/// How long an acquisition keeps the members.
#[derive(Clone, Copy)]
enum Lease {
    Watchdog,
    Fixed(Duration),
}

/// What one attempt found.
struct Attempt {
    /// What each member taken granted.
    taken: Vec<Option<Grant>>,
    /// Members whose connection broke after the request went out (it may have run).
    broken: Vec<bool>,
    /// Members that did not answer in time or answered an error.
    failed: usize,
    /// Members whose answer was read.
    read: usize,
    first_error: Option<Error>,
    /// The shortest lease left among members held by others.
    shortest_ttl: Option<Duration>,
    sent_at: Instant,
}

impl Attempt {
    fn taken_count(&self) -> usize {
        self.taken.iter().flatten().count()
    }
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

macro_rules! group_lock_api {
    ($type:ty) => {
        impl $type {
            /// Takes the lock, waiting as long as it takes; the members' watchdogs keep it
            /// while the guard lives. Fails when too few servers answer
            /// ([`Error::NoQuorum`]), or on a Redis error.
            pub fn lock(&self) -> Result<GroupGuard> {
                wait::without_deadline(|| self.group.acquire(None, Lease::Watchdog))
            }

            /// Takes the lock for a fixed `lease`, waiting as long as it takes.
            pub fn lock_with_lease(&self, lease: Duration) -> Result<GroupGuard> {
                names::lease_millis("lease", lease)?;
                wait::without_deadline(|| self.group.acquire(None, Lease::Fixed(lease)))
            }

            /// Makes one attempt (one round trip to every server); `Ok(None)` when the lock
            /// is held elsewhere.
            pub fn try_lock(&self) -> Result<Option<GroupGuard>> {
                self.group.acquire(Some(Instant::now()), Lease::Watchdog)
            }

            /// Takes the lock, waiting at most `wait`; `Ok(None)` when the wait ran out.
            pub fn try_lock_for(&self, wait: Duration) -> Result<Option<GroupGuard>> {
                self.group
                    .acquire(Some(deadline_after(wait)?), Lease::Watchdog)
            }

            /// Like `try_lock_for`, with a fixed `lease` and no watchdog.
            pub fn try_lock_for_with_lease(
                &self,
                wait: Duration,
                lease: Duration,
            ) -> Result<Option<GroupGuard>> {
                names::lease_millis("lease", lease)?;
                self.group
                    .acquire(Some(deadline_after(wait)?), Lease::Fixed(lease))
            }

            /// Whether the calling thread holds the lock, as this process knows it: taken,
            /// not released, and not known to be lost. No I/O.
            pub fn is_held_by_current_thread(&self) -> bool {
                self.group.is_held_by_current_thread()
            }

            /// The lock handles the lock is made of.
            pub fn members(&self) -> &[Lock] {
                &self.group.members
            }

            /// How many members an acquisition must take.
            pub fn required(&self) -> usize {
                self.group.required
            }
        }

        impl std::fmt::Debug for $type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($type))
                    .field("members", &self.group.members)
                    .field("required", &self.group.required)
                    .finish()
            }
        }
    };
}

group_lock_api!(RedLock);
group_lock_api!(MultiLock);

/// What a [`GroupBuilder`] builds: [`RedLock`] or [`MultiLock`] (sealed).
pub trait FromGroup: sealed::Sealed {}

impl FromGroup for RedLock {}
impl FromGroup for MultiLock {}

mod sealed {
    use std::sync::Arc;

    pub trait Sealed: Sized {
        fn from_group(group: Arc<super::Group>) -> Self;
    }

    impl Sealed for super::RedLock {
        fn from_group(group: Arc<super::Group>) -> Self {
            super::RedLock { group }
        }
    }

    impl Sealed for super::MultiLock {
        fn from_group(group: Arc<super::Group>) -> Self {
            super::MultiLock { group }
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
    /// Redlock) or the same lock twice (a multi-lock), an empty lock name, or a zero or too
    /// long timeout or delay.
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
            member.keys()?;
            let server = member.client().pool().server();
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
        let attempt_timeout = attempt_timeout.unwrap_or_else(|| {
            members
                .iter()
                .map(|member| member.client().pool().response_timeout())
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

    fn acquire(
        self: &Arc<Self>,
        deadline: Option<Instant>,
        lease: Lease,
    ) -> Result<Option<GroupGuard>> {
        for member in &self.members {
            member.client().ensure_running()?;
        }
        let thread = names::thread_number();
        if let Some(chain) = self.holds.lock().get(&thread) {
            if !chain.is_lost() {
                chain.enter();
                return Ok(Some(GroupGuard::new(Arc::clone(self), Arc::clone(chain))));
            }
        }
        let lease_ms: Vec<u64> = match lease {
            Lease::Watchdog => self
                .members
                .iter()
                .map(|member| member.client().watchdog_timeout_ms())
                .collect(),
            Lease::Fixed(duration) => {
                if duration <= clock_drift(duration) {
                    return Err(Error::InvalidArgument(format!(
                        "lease of {duration:?} is shorter than the clock drift it must allow for"
                    )));
                }
                vec![names::lease_millis("lease", duration)?; self.members.len()]
            }
        };
        let shortest_lease = Duration::from_millis(lease_ms.iter().copied().min().unwrap_or(0));
        wait::wait_until(WaitFor {
            deadline,
            default_hint: self.retry_delay,
            // Members that answer will carry the release message too: a silent one would
            // only hold up the subscription until its response timeout.
            subscribe: || {
                let mut subscriptions = Vec::new();
                for (member, silence) in self.members.iter().zip(&self.silence) {
                    if silence.lock().is_none() {
                        let hub = member.client().hub();
                        let keys = member.keys_unchecked();
                        subscriptions.push(hub.subscribe(&keys.channel, &keys.name)?);
                    }
                }
                Ok(subscriptions)
            },
            attempt: || self.attempt_once(thread, &lease_ms, shortest_lease, lease),
            ensure_running: || {
                self.members
                    .iter()
                    .try_for_each(|member| member.client().ensure_running())
            },
        })
    }

    /// One attempt of a thread that does not hold the lock yet; undoes what it took when it
    /// fails.
    fn attempt_once(
        self: &Arc<Self>,
        thread: u64,
        lease_ms: &[u64],
        shortest_lease: Duration,
        lease: Lease,
    ) -> Result<wait::Attempt<GroupGuard>> {
        let (holders, levels_held) = self.chains_to_join(thread);
        let attempt = self.attempt(&holders, lease_ms, &levels_held);
        let elapsed = attempt.sent_at.elapsed();
        let quorum = attempt.taken_count() >= self.required;
        let valid = shortest_lease > elapsed + clock_drift(shortest_lease);
        if quorum && valid {
            let (chain, given_up) = self.hold(thread, &holders, &attempt, lease);
            // Members whose connection broke after the request went out may hold a level of
            // ours; levels that joined a chain given up here belong to no live chain.
            let undo: Vec<bool> = (0..self.members.len())
                .map(|index| attempt.broken[index] || given_up[index])
                .collect();
            let keep: Vec<u32> = (0..self.members.len())
                .map(|index| {
                    if given_up[index] {
                        0
                    } else {
                        levels_held[index]
                    }
                })
                .collect();
            self.undo_members(&holders, &keep, &undo);
            return self.hand_out(thread, chain, shortest_lease, attempt.sent_at);
        }
        // Undo where the attempt took the lock, or may have through a connection that broke
        // (answers not waited for have their undo queued already); members held by others
        // have nothing of ours.
        let undo: Vec<bool> = (0..self.members.len())
            .map(|index| attempt.taken[index].is_some() || attempt.broken[index])
            .collect();
        self.undo_members(&holders, &levels_held, &undo);
        if quorum {
            // Taken, but the lease was gone before the answers were: too short a lease for
            // these servers.
            return Err(Error::LeaseSpent {
                name: self.label(),
                elapsed,
            });
        }
        if attempt.failed > self.members.len() - self.required {
            return Err(match attempt.first_error {
                Some(err) if !err.is_transient() => err,
                _ => Error::NoQuorum {
                    reachable: self.members.len() - attempt.failed,
                    required: self.required,
                    masters: self.members.len(),
                },
            });
        }
        Ok(if attempt.taken_count() > 0 {
            // A split vote: back off at random so that the contenders do not collide again.
            wait::Attempt::BackOff {
                delay: jittered(self.retry_delay),
            }
        } else {
            // Others hold it: wait for a release message, or for their lease to run out.
            wait::Attempt::Held {
                hint: attempt.shortest_ttl,
            }
        })
    }

    /// Hands out the chain of a successful attempt sent at `sent_at`, once a quorum of its
    /// members is still held and their token counters agree (raised to the largest token
    /// when they did not), while the lease is still valid; otherwise releases it: the attempt
    /// failed.
    fn hand_out(
        self: &Arc<Self>,
        thread: u64,
        chain: Arc<Chain>,
        shortest_lease: Duration,
        sent_at: Instant,
    ) -> Result<wait::Attempt<GroupGuard>> {
        let give_back = |chain: &Chain| {
            if let Err(err) = self.release(chain) {
                log::debug!("lock {:?}: release failed: {err}", self.label());
            }
        };
        if chain.alive() < self.required {
            give_back(&chain);
            return Ok(wait::Attempt::Again);
        }
        if chain.tokens_differ() {
            if let Err(err) = self.raise_token(&chain, chain.fence()) {
                // Too few members still held, or answered, to hand out a token that later
                // holders are sure to exceed.
                give_back(&chain);
                return match err {
                    Error::NoQuorum { .. } => Err(err),
                    _ => Ok(wait::Attempt::Again),
                };
            }
            let elapsed = sent_at.elapsed();
            if shortest_lease <= elapsed + clock_drift(shortest_lease) {
                give_back(&chain);
                return Err(Error::LeaseSpent {
                    name: self.label(),
                    elapsed,
                });
            }
        }
        self.holds.lock().insert(thread, Arc::clone(&chain));
        Ok(wait::Attempt::Taken(GroupGuard::new(
            Arc::clone(self),
            chain,
        )))
    }

    /// Per member: the holder id and levels of the chain `thread` holds there already (a
    /// single lock on the same name), or a new holder id and no levels.
    fn chains_to_join(&self, thread: u64) -> (Vec<String>, Vec<u32>) {
        self.members
            .iter()
            .map(|member| {
                let watchdog = member.client().watchdog();
                match watchdog.chain_of(member.name(), thread) {
                    Some((holder, levels)) => (holder.to_string(), levels),
                    None => (member.client().new_holder_id(), 0),
                }
            })
            .unzip()
    }

    /// Sends the acquire script to the members at once and reads the answers: trusted
    /// members first, then those whose last answer did not come in time, unless the vote is
    /// settled by then. A silent member is only asked when the others cannot make the quorum
    /// alone, or as a probe once per [`SILENT_PROBE_INTERVAL`]: every request to a frozen
    /// server costs a connection in its accept queue. Answers not waited for get an undo
    /// queued behind their request.
    fn attempt(&self, holders: &[String], lease_ms: &[u64], levels_held: &[u32]) -> Attempt {
        let count = self.members.len();
        let sent_at = Instant::now();
        let silent: Vec<bool> = self.silence.iter().map(|s| s.lock().is_some()).collect();
        let trusted = silent.iter().filter(|silent| !**silent).count();
        let trusted_alone = trusted >= self.required;
        let asked: Vec<usize> = (0..count)
            .filter(|&index| !silent[index])
            .chain((0..count).filter(|&index| {
                silent[index] && (!trusted_alone || self.probe_turn(index, sent_at))
            }))
            .collect();
        let requests: Vec<Request<'_>> = asked
            .iter()
            .map(|&index| {
                let member = &self.members[index];
                Request {
                    pool: member.client().pool(),
                    call: protocol::acquire(
                        member.keys_unchecked(),
                        &holders[index],
                        levels_held[index],
                        lease_ms[index],
                    ),
                }
            })
            .collect();
        let deadline = sent_at + self.attempt_timeout;
        let mut fan_out = FanOut::send(&requests, deadline);
        let mut attempt = Attempt {
            taken: vec![None; count],
            broken: vec![false; count],
            // Members not asked count as failed.
            failed: count - asked.len(),
            read: count - asked.len(),
            first_error: None,
            shortest_ttl: None,
            sent_at,
        };
        let mut probe_deadline = None;
        for (position, &index) in asked.iter().enumerate() {
            let probe = silent[index] && trusted_alone;
            if !probe && attempt.taken_count() + (count - attempt.read) < self.required {
                // No quorum whatever the rest answer: not waited for (undone below).
                continue;
            }
            let deadline = if probe {
                // Read whatever the vote: as long again as the trusted members took, enough
                // for a member that has come back to be trusted again.
                *probe_deadline.get_or_insert_with(|| {
                    let now = Instant::now();
                    (now + (now - sent_at).max(Duration::from_millis(1))).min(deadline)
                })
            } else {
                deadline
            };
            let answer = fan_out.read(position, deadline).and_then(|value| {
                redis::from_redis_value::<Acquired>(value).map_err(|err| Error::Redis(err.into()))
            });
            attempt.read += 1;
            let mut silence = self.silence[index].lock();
            match answer {
                Err(Error::Timeout(_)) => {
                    silence.get_or_insert(sent_at);
                }
                _ => *silence = None,
            }
            drop(silence);
            match answer {
                Ok(Acquired::Taken { token }) => {
                    let joins = levels_held[index] > 0;
                    attempt.taken[index] = Some(Grant { token, joins });
                }
                Ok(Acquired::ChainGone) => {
                    // The member's chain (a single lock of this thread) is gone: the next
                    // attempt starts a new one there.
                    let member = &self.members[index];
                    let watchdog = member.client().watchdog();
                    watchdog.chain_gone(member.name(), &holders[index]);
                }
                Ok(Acquired::Held { ttl }) => {
                    if let Some(ttl) = ttl {
                        attempt.shortest_ttl = Some(
                            attempt
                                .shortest_ttl
                                .map_or(ttl, |shortest| shortest.min(ttl)),
                        );
                    }
                }
                Err(err) => {
                    attempt.broken[index] = matches!(
                        &err,
                        Error::Unreachable(cause) if !cause.is_connection_refusal()
                    );
                    attempt.failed += 1;
                    attempt.first_error.get_or_insert(err);
                }
            }
        }
        for (position, &index) in asked.iter().enumerate() {
            if fan_out.is_pending(position) {
                let member = &self.members[index];
                let undo =
                    protocol::undo(member.keys_unchecked(), &holders[index], levels_held[index]);
                fan_out.abandon(position, &undo.as_eval().get_packed_command());
            }
        }
        attempt
    }

    /// Whether the silent member `index` is to be probed by an attempt starting `now`; at
    /// most one attempt (of any thread) probes it per [`SILENT_PROBE_INTERVAL`].
    fn probe_turn(&self, index: usize, now: Instant) -> bool {
        let mut silence = self.silence[index].lock();
        match *silence {
            Some(last_probe)
                if now.saturating_duration_since(last_probe) >= SILENT_PROBE_INTERVAL =>
            {
                *silence = Some(now);
                true
            }
            _ => false,
        }
    }

    /// The chain of a successful attempt: every member taken goes to its client's watchdog.
    /// Also answers, per member, whether its level joined a chain given up there meanwhile
    /// (it is not part of the new chain, and its hold is to be taken back).
    fn hold(
        &self,
        thread: u64,
        holders: &[String],
        attempt: &Attempt,
        lease: Lease,
    ) -> (Arc<Chain>, Vec<bool>) {
        let fixed = match lease {
            Lease::Watchdog => None,
            Lease::Fixed(duration) => Some(duration),
        };
        let mut given_up = vec![false; self.members.len()];
        let members = self
            .members
            .iter()
            .zip(holders)
            .zip(&attempt.taken)
            .enumerate()
            .map(|(index, ((member, holder), grant))| {
                let grant = (*grant)?;
                let watched = member.client().watchdog().watch(
                    member.name(),
                    holder,
                    thread,
                    grant,
                    attempt.sent_at,
                    fixed,
                );
                given_up[index] = watched.is_none();
                watched.map(|(lease, token)| MemberHold { token, lease })
            })
            .collect();
        let chain = Chain::new(holders.to_vec(), members, fixed, self.required);
        (chain, given_up)
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
        let latches: Vec<String> = asked
            .iter()
            .map(|&(index, _)| {
                let member = &self.members[index];
                member
                    .keys_unchecked()
                    .unlock_latch(&member.client().next_request_id())
            })
            .collect();
        let requests: Vec<Request<'_>> = asked
            .iter()
            .zip(&latches)
            .map(|(&(index, left), latch)| {
                let member = &self.members[index];
                let keys = member.keys_unchecked();
                Request {
                    pool: member.client().pool(),
                    call: protocol::release(
                        keys,
                        latch,
                        &holders[index],
                        lease_ms[index],
                        member.client().release_latch_ms(),
                        left.total(),
                    ),
                }
            })
            .collect();
        let mut outcomes: Vec<Option<Result<bool>>> =
            (0..self.members.len()).map(|_| None).collect();
        if requests.is_empty() {
            return outcomes;
        }
        let deadline = Instant::now() + self.attempt_timeout;
        let answers = fanout::call_all(&requests, deadline);
        for (((index, _), latch), answer) in asked.into_iter().zip(latches).zip(answers) {
            if answer.is_ok() {
                // The answer has arrived: the latch will not be asked again.
                self.members[index].client().watchdog().discard_latch(latch);
            }
            outcomes[index] = Some(answer.map(|value| protocol::released(&value)));
        }
        outcomes
    }

    /// Takes back what an attempt added on the members marked in `which`, leaving
    /// `levels_held`, all at once.
    fn undo_members(&self, holders: &[String], levels_held: &[u32], which: &[bool]) {
        let requests: Vec<Request<'_>> = (0..self.members.len())
            .filter(|&index| which[index])
            .map(|index| {
                let member = &self.members[index];
                Request {
                    pool: member.client().pool(),
                    call: protocol::undo(
                        member.keys_unchecked(),
                        &holders[index],
                        levels_held[index],
                    ),
                }
            })
            .collect();
        if requests.is_empty() {
            return;
        }
        let deadline = Instant::now() + self.attempt_timeout;
        for answer in fanout::call_all(&requests, deadline) {
            if let Err(err) = answer {
                log::debug!("lock {:?}: undo of an attempt failed: {err}", self.label());
            }
        }
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
                None => member.client().watchdog_timeout_ms(),
            })
            .collect();
        let releases: Vec<Option<LevelsLeft>> = self
            .members
            .iter()
            .zip(&chain.members)
            .map(|(member, hold)| {
                let hold = hold.as_ref()?;
                let watchdog = member.client().watchdog();
                let left = watchdog.unwatch(member.name(), &hold.lease, chain.fixed.is_some());
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
            .map(|((member, holder), _)| Request {
                pool: member.client().pool(),
                call: group_protocol::raise_token(member.keys_unchecked(), holder, token),
            })
            .collect();
        let deadline = Instant::now() + self.attempt_timeout;
        let answers = fanout::call_all(&requests, deadline);
        let raised = answers
            .iter()
            .filter(|answer| matches!(answer, Ok(redis::Value::Int(1))))
            .count();
        let unanswered = answers.iter().filter(|answer| answer.is_err()).count();
        self.judge(raised, unanswered, || Error::LockLost {
            name: self.label(),
            reason: LostReason::NotHeldAnymore,
        })
    }
}

/// `delay` times a random factor between 0.5 and 1.5.
fn jittered(delay: Duration) -> Duration {
    // Any source of randomness does; the v4 UUID generator is at hand.
    // The high half of a v4 UUID is random but for the version nibble, which lands in the
    // lowest bits kept here.
    let bits = (uuid::Uuid::new_v4().as_u128() >> 64) as u64 >> 11;
    let random = bits as f64 / (1u64 << 53) as f64;
    delay.mul_f64(0.5 + random)
}
