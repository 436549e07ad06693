//! [`LeaderObserver`]: follows an election's change log, woken by the election's channel.
//!
//! Each change (an election, a resignation) is an entry of a stream in Redis, written by the
//! announcement of a leader that holds the lock, or in the same step as its resignation; an
//! observer remembers the last entry it told and reads the next.
//! Waiting for one is the shared wait loop: subscribed to the election's channel (every
//! message wakes it), riding out outages like every other wait.

use std::time::{Duration, Instant};

use super::{Leader, LeaderElection};
use crate::client::wait::{self, WaitFor};
use crate::error::{Error, Result};
use crate::protocol::election::{self as protocol, LoggedChange};

/// A change of an election's leader, as a [`LeaderObserver`] tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderChange {
    /// A new leader, with its value, term and since when.
    Elected(Leader),
    /// The leader resigned (released its guard); nobody leads until the next election.
    Resigned(Leader),
}

impl From<LoggedChange> for LeaderChange {
    fn from(change: LoggedChange) -> Self {
        match change.elected {
            true => LeaderChange::Elected(change.leader.into()),
            false => LeaderChange::Resigned(change.leader.into()),
        }
    }
}

/// Tells every change of an election's leader from when it was made
/// ([`LeaderElection::observe`]), in order, in any process: each election and each
/// resignation. A leader that dies or is freed by force is not a change of its own: the
/// next election tells its successor (and [`LeaderElection::leader`] no longer names it).
///
/// The changes come from a log the election keeps in Redis (about the last 1000): an
/// observer that falls further behind than that misses the oldest of them, and goes on from
/// the oldest still there. Waits are woken by the election's channel, not by polling.
pub struct LeaderObserver {
    election: LeaderElection,
    /// The leader as the last change told (or as read when observing began).
    leader: Option<Leader>,
    /// The id of the last log entry told (empty: none yet).
    last_change: String,
}

impl LeaderObserver {
    pub(super) fn new(
        election: LeaderElection,
        leader: Option<Leader>,
        last_change: String,
    ) -> Self {
        LeaderObserver {
            election,
            leader,
            last_change,
        }
    }

    /// The leader as this observer knows it: as read when it began, then as the last
    /// change told. No I/O.
    pub fn leader(&self) -> Option<&Leader> {
        self.leader.as_ref()
    }

    /// The next change, waiting as long as it takes (through an outage, up to the manager's
    /// [`outage_grace`](crate::LockManagerBuilder::outage_grace)).
    pub fn next_change(&mut self) -> Result<LeaderChange> {
        wait::without_deadline(|| self.wait_for_change(None))
    }

    /// The next change, waiting at most `wait`: `Ok(None)` when none came.
    pub fn next_change_for(&mut self, wait: Duration) -> Result<Option<LeaderChange>> {
        let deadline = wait::deadline_after(wait, "next_change_for")?;
        self.wait_for_change(Some(deadline))
    }

    /// The next change, waiting until `deadline` at most: `Ok(None)` when none came.
    pub fn next_change_until(&mut self, deadline: Instant) -> Result<Option<LeaderChange>> {
        self.wait_for_change(Some(deadline))
    }

    fn wait_for_change(&mut self, deadline: Option<Instant>) -> Result<Option<LeaderChange>> {
        let election = &self.election;
        let client = &election.client;
        client.ensure_running()?;
        // The last entry read: a change told, or an entry passed over.
        let after = std::cell::RefCell::new(self.last_change.clone());
        let change = wait::wait_until(WaitFor {
            name: None,
            deadline,
            // Changes are announced; looking again now and then only guards against a lost
            // announcement.
            default_hint: client.watchdog_timeout(),
            subscribe: || {
                let pubsub = client.pubsub();
                Ok(vec![
                    pubsub.subscribe_to_every_message(&election.keys.channel)?
                ])
            },
            attempt: || {
                let read = protocol::changes_after(&election.keys.log, &after.borrow(), 1);
                let value: redis::Value =
                    client.run(&election.keys.log, |connection| read.query(connection))?;
                let changes =
                    protocol::logged_changes(value).map_err(|err| Error::Redis(err.into()))?;
                Ok(match changes.into_iter().next() {
                    Some((_, Some(change))) => wait::Attempt::Taken(change),
                    Some((id, None)) => {
                        // Not a change (written by someone else): pass over it.
                        *after.borrow_mut() = id;
                        wait::Attempt::Again
                    }
                    None => wait::Attempt::Held { hint: None },
                })
            },
            ensure_running: || client.ensure_running(),
            cancel: None,
            outage_grace: client.outage_grace(),
            recorder: client.wait_recorder(),
            nudge: None,
            subscribe_first: false,
        })?;
        self.last_change = after.into_inner();
        Ok(change.map(|change| {
            self.last_change.clone_from(&change.id);
            let change = LeaderChange::from(change);
            self.leader = match &change {
                LeaderChange::Elected(leader) => Some(leader.clone()),
                LeaderChange::Resigned(_) => None,
            };
            change
        }))
    }
}

impl std::fmt::Debug for LeaderObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderObserver")
            .field("election", &self.election.name())
            .field("leader", &self.leader)
            .finish()
    }
}
