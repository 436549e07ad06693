//! Local handoffs: the line of this process's threads that wait for one plain lock (or write
//! lock), which a releasing thread of the same manager may hand the lock to inside its
//! release script.
//!
//! A waiter that found the lock held takes a [`Place`] in the line of its lock name, with
//! its chain's holder id, the lease it asks for and the [`LocalWaker`] of its wait. A thread
//! that releases its last level asks the line for an [`Offer`]: the first waiter still
//! waiting, unless the name was handed on [`Lines::limit`] times in a row already (then the
//! release frees the lock for everyone, other processes included, and the count starts
//! again). The release script hands the lock to the offered holder id, or does not (the
//! releaser's hold was gone); the releaser then settles the offer, which wakes the waiter
//! with what it was given. A waiter that leaves the line with a grant it did not take is told
//! to take its hold back ([`Place::leave`]); a releaser whose release was answered after its
//! waiter left is told the same ([`Offer::settle`]). A release that went unanswered leaves its
//! offer [unknown](Offer::unknown) until a repeat of it is answered, which settles it.
//!
//! No I/O here: the line only matches a releasing thread with a waiting one. Its promises are
//! tested under the orders of its threads' steps (`schedules`, run by `shuttle`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::client::pubsub::LocalWaker;

/// The lines of one client, by lock name, and how many handoffs in a row a name may have.
pub(crate) struct Lines {
    lines: Mutex<HashMap<String, Line>>,
    limit: u32,
}

#[derive(Default)]
struct Line {
    waiters: VecDeque<Arc<Waiting>>,
    /// Handoffs since the lock was last freed for everyone.
    handed_in_a_row: u32,
}

/// One waiter's entry in a line.
struct Waiting {
    holder: String,
    lease_ms: u64,
    waker: LocalWaker,
    state: Mutex<State>,
}

/// Where an entry's waiter stands.
#[derive(Clone, Copy)]
enum State {
    /// Waiting; nobody is handing it the lock.
    Waiting,
    /// A release that may hand it the lock is on its way.
    Offered,
    /// Handed the lock, not yet taken.
    Granted(Handed),
    /// A release that may have handed it the lock went unanswered, and is sent again until
    /// answered; meanwhile the waiter tries as before (its acquire script finds a hold handed
    /// to it its own), and nothing else is offered to it.
    Unknown,
    /// The waiter left the line without the lock.
    Left,
    /// The waiter holds the lock by the chain the place waited with: it took its grant, or
    /// its own try found the lock its own.
    Took,
}

/// What a release handed a waiter: the fencing token, and when the release was sent (the
/// lease it gave runs from no earlier than that).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handed {
    pub(crate) token: u64,
    pub(crate) sent_at: Instant,
}

/// How a release offered to a waiter turned out.
pub(crate) enum Outcome {
    Handed(Handed),
    NotHanded,
}

impl Lines {
    /// Lines that let a name be handed on at most `limit` times in a row (0: never).
    pub(crate) fn new(limit: u32) -> Self {
        Lines {
            lines: Mutex::new(HashMap::new()),
            limit,
        }
    }

    /// How many handoffs in a row a lock name may have before a release frees it for
    /// everyone.
    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }

    /// Puts the chain `holder`, which asks for a lease of `lease_ms`, at the back of the line
    /// for `name`; `waker` wakes its wait. (With a limit of 0 the line is never offered: the
    /// caller does not join it.)
    pub(crate) fn join(
        &self,
        name: &str,
        holder: &str,
        lease_ms: u64,
        waker: LocalWaker,
    ) -> Place<'_> {
        let waiting = Arc::new(Waiting {
            holder: holder.to_owned(),
            lease_ms,
            waker,
            state: Mutex::new(State::Waiting),
        });
        let mut lines = self.lines.lock();
        let line = lines.entry(name.to_owned()).or_default();
        line.waiters.push_back(Arc::clone(&waiting));
        Place {
            lines: self,
            name: name.to_owned(),
            waiting,
        }
    }

    /// The waiter a release of `name`'s last level may hand the lock to: the first that is
    /// still waiting, unless the name was handed on as often in a row as the limit allows
    /// (then `None`, and the count starts again: this release frees the lock for everyone).
    pub(crate) fn offer(&self, name: &str) -> Option<Offer> {
        let mut lines = self.lines.lock();
        let line = lines.get_mut(name)?;
        if line.handed_in_a_row >= self.limit {
            line.handed_in_a_row = 0;
            if line.waiters.is_empty() {
                lines.remove(name);
            }
            return None;
        }
        let waiting = line.waiters.iter().find(|waiting| {
            let mut state = waiting.state.lock();
            let waits = matches!(*state, State::Waiting);
            if waits {
                *state = State::Offered;
            }
            waits
        })?;
        line.handed_in_a_row += 1;
        Some(Offer {
            waiting: Arc::clone(waiting),
        })
    }

    /// Whether threads wait in the line for `name`.
    pub(crate) fn has_waiters(&self, name: &str) -> bool {
        let lines = self.lines.lock();
        lines.get(name).is_some_and(|line| !line.waiters.is_empty())
    }

    /// A release of `name` freed the lock for everyone: the count of handoffs in a row starts
    /// again.
    pub(crate) fn freed(&self, name: &str) {
        let mut lines = self.lines.lock();
        if let Some(line) = lines.get_mut(name) {
            line.handed_in_a_row = 0;
            if line.waiters.is_empty() {
                lines.remove(name);
            }
        }
    }

    fn remove(&self, name: &str, waiting: &Arc<Waiting>) {
        let mut lines = self.lines.lock();
        if let Some(line) = lines.get_mut(name) {
            line.waiters.retain(|other| !Arc::ptr_eq(other, waiting));
            if line.waiters.is_empty() && line.handed_in_a_row == 0 {
                lines.remove(name);
            }
        }
    }
}

/// A waiter's place in a line, which dropping it leaves: [`Place::kept`] once the waiter
/// holds the lock by the place's chain, [`Place::leave`] otherwise (it says whether there is
/// a hold to take back).
pub(crate) struct Place<'a> {
    lines: &'a Lines,
    name: String,
    waiting: Arc<Waiting>,
}

impl Place<'_> {
    /// The holder id the place waits with.
    pub(crate) fn holder(&self) -> &str {
        &self.waiting.holder
    }

    /// What a release handed this waiter, if it did: taken, it is the waiter's (the place
    /// then hands nothing more).
    pub(crate) fn take_grant(&self) -> Option<Handed> {
        let mut state = self.waiting.state.lock();
        match *state {
            State::Granted(handed) => {
                *state = State::Took;
                Some(handed)
            }
            _ => None,
        }
    }

    /// Leaves the line holding the lock by the place's chain (its own try took it, or found
    /// it handed): a release on its way that hands it the lock hands it what it holds.
    pub(crate) fn kept(self) {
        *self.waiting.state.lock() = State::Took;
    }

    /// Leaves the line; answers whether the waiter holds a grant it will not use (handed and
    /// not taken), which the caller takes back. A release on its way, or whose outcome is not
    /// known yet, takes back what it handed once it is answered.
    pub(crate) fn leave(self) -> bool {
        let mut state = self.waiting.state.lock();
        let previous = std::mem::replace(&mut *state, State::Left);
        if matches!(previous, State::Took) {
            *state = State::Took;
        }
        matches!(previous, State::Granted(_))
    }
}

impl Drop for Place<'_> {
    /// Takes the place out of the line: a waiter that left it is offered nothing more.
    fn drop(&mut self) {
        {
            let mut state = self.waiting.state.lock();
            if !matches!(*state, State::Took) {
                *state = State::Left;
            }
        }
        self.lines.remove(&self.name, &self.waiting);
    }
}

/// A release's offer to one waiter, to be [settled](Offer::settle) once the release is
/// answered.
pub(crate) struct Offer {
    waiting: Arc<Waiting>,
}

impl Offer {
    /// The holder id the release hands the lock to.
    pub(crate) fn holder(&self) -> &str {
        &self.waiting.holder
    }

    /// The lease the waiter asked for, in ms.
    pub(crate) fn lease_ms(&self) -> u64 {
        self.waiting.lease_ms
    }

    /// Tells the waiter the release went unanswered and may have handed it the lock, and
    /// wakes it to try (it finds such a hold its own); it is settled once a repeat of the
    /// release is answered.
    pub(crate) fn unknown(&self) {
        let mut state = self.waiting.state.lock();
        if matches!(*state, State::Offered) {
            *state = State::Unknown;
            drop(state);
            self.waiting.waker.wake();
        }
    }

    /// Tells the waiter how the release turned out, and wakes it when it was handed the lock.
    /// Answers whether the waiter has left meanwhile and was handed the lock: the caller takes
    /// that hold back.
    pub(crate) fn settle(self, outcome: Outcome) -> bool {
        let mut state = self.waiting.state.lock();
        match *state {
            State::Left => return matches!(outcome, Outcome::Handed(_)),
            State::Took => return false,
            _ => {}
        }
        *state = match outcome {
            Outcome::Handed(handed) => State::Granted(handed),
            Outcome::NotHanded => State::Waiting,
        };
        drop(state);
        if matches!(outcome, Outcome::Handed(_)) {
            self.waiting.waker.wake();
        }
        false
    }
}

#[cfg(test)]
mod schedules;
