//! Leader election: [`LeaderElection`] (who leads, and how to follow it), its
//! [`Candidate`]s and the [`LeaderGuard`] of the one that leads.
//!
//! The leader holds a plain lock on the election's name (Redisson's lock layout: renewed by
//! the watchdog, expiring when its holder dies, freed by `break_lock`, asked to let go by
//! `request_revocation`); the election's scripts (`crate::protocol::election`) add a leader
//! record (value, term, since when), a change log and an announcement on the election's
//! channel: written once the candidate's guard exists (a campaign whose caller gave up is
//! never announced), and in the same step as the last release. A candidate is a lock handle
//! over the lock's own acquisition code, with its value in its keys; [`observe`] follows the
//! log. It talks to Redis only through the client.

mod observe;

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::client::Client;
use crate::error::{Error, LostReason, Result};
use crate::primitives::hold::guard::Guard;
use crate::primitives::hold::handle::{
    revocable_handle, LockHandle, RawAcquire, RawRevocable, Terms,
};
use crate::primitives::lock::{Lock, LockHold, LockKind, OverLockHold, RawLock};
use crate::protocol::election::{self as protocol, ElectionLock, LeaderRecord};
use crate::protocol::names::ElectionKeys;

pub use observe::{LeaderChange, LeaderObserver};

/// An election among any number of candidates in any processes: at most one leads at a
/// time, by holding a lock on the election's name that the watchdog keeps alive. Cheap to
/// clone; `Send` and `Sync`.
///
/// - **Campaign**: [`candidate`](Self::candidate) with a value (an address, an instance id)
///   and take it like a lock: [`lock`](LockHandle::lock) blocks until this candidate leads,
///   [`try_lock_for`](LockHandle::try_lock_for) and the rest wait less,
///   [`cancellable_by`](LockHandle::cancellable_by) ends the wait. The answer is a [`LeaderGuard`],
///   with the lost and at-risk signals of a lock guard.
/// - **Resign** by dropping the guard or with [`unlock`](crate::Guard::unlock); a leader that dies is
///   replaced within its lease (the watchdog timeout); one whose process pauses past its
///   lease finds its guard lost when it resumes ([`Guard::is_lost`]), before anything else
///   it checks.
/// - **Follow**: [`leader`](Self::leader) reads the leader now, without campaigning;
///   [`observe`](Self::observe) hands out a [`LeaderObserver`] whose
///   [`next_change`](LeaderObserver::next_change) waits (woken by pub/sub) for the next
///   election or resignation, in order, from a log in Redis.
///
/// ```
/// # fn main() -> redlease::Result<()> {
/// # let redis = redlease_testing::RedisServer::start().expect("redis-server");
/// # let manager = redlease::LockManager::builder(redis.url()).build()?;
/// let election = manager.leader_election("scheduler");
/// let mut observer = election.observe()?;
///
/// let leading = election.candidate("host-a:8080").lock()?; // blocks until it leads
/// assert_eq!(election.leader()?.unwrap().value, "host-a:8080");
///
/// // ... run the scheduler while `leading` lives; check leading.is_lost() between steps ...
/// leading.unlock()?;
///
/// use redlease::LeaderChange;
/// assert!(matches!(observer.next_change()?, LeaderChange::Elected(leader) if leader.value == "host-a:8080"));
/// assert!(matches!(observer.next_change()?, LeaderChange::Resigned(_)));
/// assert_eq!(election.leader()?, None);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LeaderElection {
    client: Arc<Client>,
    /// The election's lock, for what needs no candidate (reading, asking the leader).
    lock: Lock,
    keys: Arc<ElectionKeys>,
}

/// A candidate of a [`LeaderElection`], with its value: take it with the acquisition calls
/// of [`LockHandle`] (`lock` to campaign until it leads, `try_lock_for`, `cancellable_by`,
/// `revoking_after`...). Cheap to clone; `Send` and `Sync`.
pub type Candidate = LockHandle<RawCandidate>;

/// The raw candidate behind a [`Candidate`] (`pub` in a private module: it names the
/// handle's type).
#[derive(Clone)]
pub struct RawCandidate {
    lock: RawLock,
    /// The election's lock, as the candidate's kind of lock (the lock's kind too).
    lock_kind: Arc<ElectionLock>,
}

impl std::fmt::Debug for RawCandidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawCandidate")
            .field("lock", &self.lock)
            .finish()
    }
}

/// An election's lock has the default rules: a plain lock's, except that it is no group's
/// member and hands nothing on (a release is its holder's resignation, announced).
impl LockKind for ElectionLock {}

impl RawAcquire for RawCandidate {
    type Hold = LeaderHold;

    /// Takes the election's lock as any lock is taken, then announces the leader, once its
    /// guard exists: a campaign whose caller gave up (its try ran late and was undone) is
    /// never announced. An announcement that fails gives the lock back (the guard's drop,
    /// whose resignation is logged only if the announcement was).
    fn acquire(&self, terms: Terms<'_>) -> Result<Option<LeaderGuard>> {
        let deadline = terms.deadline;
        let Some(guard) = self.lock.acquire_level(terms, |hold| LeaderHold { hold })? else {
            return Ok(None);
        };
        self.announce(&guard, deadline)?;
        Ok(Some(guard))
    }
}

impl RawCandidate {
    /// Announces `guard`'s holder as the leader, sent again through an outage until
    /// `deadline` (without one, for the outage grace).
    fn announce(&self, guard: &LeaderGuard, deadline: Option<Instant>) -> Result<()> {
        let client = self.lock.client();
        let name = self.lock.name();
        let call = self.lock_kind.announce(guard.holder_id(), guard.term());
        let give_up_at = deadline.unwrap_or_else(|| Instant::now() + client.outage_grace());
        let leads: i64 = client.settle_until(name, give_up_at, || client.run_script(&call))?;
        match leads {
            1 => Ok(()),
            _ => Err(Error::LockLost {
                name: name.to_owned(),
                reason: LostReason::NotHeldAnymore,
            }),
        }
    }
}

revocable_handle!(RawCandidate);

impl RawRevocable for RawCandidate {
    fn request_revocation(&self) -> Result<usize> {
        self.lock.request_revocation()
    }
}

/// The leader of an election, as its record says.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    /// The value it campaigned with.
    pub value: String,
    /// The holder id of its lock (a [`LeaderGuard::holder_id`]).
    pub holder_id: String,
    /// Its term: the fencing token of its lock, greater than every earlier leader's.
    pub term: u64,
    /// Since when it leads, by the Redis server's clock.
    pub since: SystemTime,
}

impl From<LeaderRecord> for Leader {
    fn from(record: LeaderRecord) -> Self {
        Leader {
            value: record.value,
            holder_id: record.holder,
            term: record.term,
            since: record.since,
        }
    }
}

impl LeaderElection {
    pub(crate) fn new(client: Arc<Client>, name: &str) -> Self {
        LeaderElection {
            lock: Lock::plain(Arc::clone(&client), name),
            keys: Arc::new(ElectionKeys::new(name, "")),
            client,
        }
    }

    /// The election's name: the Redis key of its lock.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// A candidate that campaigns with `value` (what the others read as the leader's value
    /// while it leads: an address, an instance id). Taking it is campaigning; the guard is
    /// the leadership.
    pub fn candidate(&self, value: &str) -> Candidate {
        let lock_kind = Arc::new(ElectionLock::new(self.name(), value));
        let lock = Lock::of_kind(Arc::clone(&self.client), Arc::clone(&lock_kind) as _);
        LockHandle::from_raw(
            RawCandidate {
                lock: lock.raw().clone(),
                lock_kind,
            },
            None,
        )
    }

    /// The leader now, read from Redis without campaigning: `None` when nobody leads (never
    /// elected, resigned, or a leader whose lock ran out or was freed by force).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty name; the
    /// errors of a call to Redis.
    pub fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.read()?.leader.map(Leader::from))
    }

    /// A [`LeaderObserver`] that tells every change from now on, in order.
    ///
    /// # Errors
    /// As [`leader`](Self::leader).
    pub fn observe(&self) -> Result<LeaderObserver> {
        let now = self.read()?;
        Ok(LeaderObserver::new(
            self.clone(),
            now.leader.map(Leader::from),
            now.last_change,
        ))
    }

    /// Asks the leader to let go (see [`LockHandle::request_revocation`]): its guard is told,
    /// and nothing else happens unless it resigns. Answers how many holds were asked, as
    /// every `request_revocation` does: 1 when someone leads, 0 when nobody does.
    pub fn request_revocation(&self) -> Result<usize> {
        self.lock.request_revocation()
    }

    fn read(&self) -> Result<protocol::LeaderNow> {
        let name = self.lock.raw().keys()?.name.as_str();
        self.client
            .run_script(&protocol::read_leader(name, &self.keys))
    }
}

impl std::fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElection")
            .field("name", &self.name())
            .finish()
    }
}

/// What a [`LeaderGuard`] holds (`pub` in a private module: it names the guard's type).
pub struct LeaderHold {
    hold: LockHold,
}

impl OverLockHold for LeaderHold {
    const GUARD: &'static str = "LeaderGuard";

    fn lock_hold(&self) -> &LockHold {
        &self.hold
    }
}

/// The leadership of an election, held by the current thread: a [`Guard`] (lost and
/// at-risk signals, `valid_for`, revocation requests) whose drop resigns.
///
/// [`unlock`](Guard::unlock) resigns now and reports the outcome: the election is told (its
/// log and channel) in the same step as the lock is freed, and the next candidate is woken;
/// [`Error::NotHeld`](crate::Error::NotHeld) when the leadership was lost before.
pub type LeaderGuard = Guard<LeaderHold>;

impl Guard<LeaderHold> {
    /// This leader's term: the fencing token of its lock, greater than every earlier
    /// leader's (a [`FencedStore`](crate::FencedStore) accepts it as a token).
    pub fn term(&self) -> u64 {
        self.hold().hold.token()
    }

    /// The holder id of the leadership's lock, as [`Leader::holder_id`] shows it.
    pub fn holder_id(&self) -> &str {
        self.hold().hold.holder()
    }
}
