//! One wait for a level of a lock: the chain it tries for, what a release may hand it, and
//! what its tries may have left in Redis, taken back when the wait ends without the level.
//!
//! The wait loop (`crate::client::wait`) drives an [`Acquisition`] through its `subscribe` and
//! `attempt` steps; the tries themselves are [`RawLock`]'s scripts. What lives here is the
//! judgement of each try's answer: a guard, a wait, a new chain, or an error.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use super::handoff::{Handed, Handoffs};
use super::{undo_may_come_late, Chain, Granted, LockHold, NoGuard, RawLock, Tried, TryOf};
use crate::client::pubsub::Subscription;
use crate::client::wait::Attempt;
use crate::client::Undoing;
use crate::error::{Error, LostReason, Result};
use crate::primitives::hold::guard::{Guard, Hold};
use crate::primitives::hold::handle::Terms;
use crate::protocol::lock::Acquired;
use crate::protocol::names;

/// One wait for a level of `lock` by the calling thread, on `terms`; `make` makes the
/// guard's hold of the level taken (a primitive built on the lock wraps it).
pub(super) struct Acquisition<'a, F> {
    lock: &'a RawLock,
    terms: Terms<'a>,
    make: F,
    thread: u64,
    /// A level of the chain the thread holds, or a new chain with a holder id of its own.
    chain: RefCell<Chain>,
    /// Whether an attempt may have put the chain in a fair lock's queue.
    queued: Cell<bool>,
    /// Whether a try of a reentrant level may have added it (its answer lost, or short of
    /// acknowledgements): taken back if the wait ends without the level.
    level_may_stand: Cell<bool>,
    /// How many tries found the lock held: a kind whose waiters poll spaces them by it.
    held_tries: Cell<u32>,
    /// What a release may hand the chain: its place in the line of this process's waiters
    /// (left when the chain is given up), a fair lock's grant.
    handoffs: Handoffs<'a>,
}

impl<'a, H: Hold, F: Fn(LockHold) -> H> Acquisition<'a, F> {
    /// A wait of the calling thread for a level of `lock`: it joins the chain the thread
    /// holds, or starts a new one.
    pub(super) fn new(lock: &'a RawLock, terms: Terms<'a>, make: F) -> Result<Self> {
        let thread = names::thread_number();
        Ok(Acquisition {
            lock,
            terms,
            make,
            thread,
            chain: RefCell::new(lock.chain_to_join(thread)?),
            queued: Cell::new(false),
            level_may_stand: Cell::new(false),
            held_tries: Cell::new(0),
            handoffs: Handoffs::default(),
        })
    }

    /// Whether other threads of the process wait for the lock already (it is held, most
    /// likely): the wait subscribes before its first try.
    pub(super) fn others_wait(&self) -> bool {
        self.lock
            .line_is_waiting(&self.chain.borrow(), self.terms.deadline)
    }

    /// Subscribes the chain to what announces a release, and to what hands it the lock.
    pub(super) fn subscribe(&self) -> Result<Vec<Subscription>> {
        let chain = self.chain.borrow();
        self.handoffs.subscribe(self.lock, &chain, self.terms.lease)
    }

    /// One step of the wait: the lock a release handed the chain, or one try, judged.
    pub(super) fn attempt(&self) -> Result<Attempt<Guard<H>>> {
        let chain = self.chain.borrow().clone();
        if let Some(handed) = self.take_handed(&chain.holder)? {
            return Ok(handed);
        }
        let lock = self.lock;
        let grants = lock.accepts_grant() && self.handoffs.hears_grants_for(&chain.holder);
        let tried = lock.attempt(&chain, self.terms.lease, grants);
        if tried.as_ref().is_err_and(undo_may_come_late) {
            self.after_unknown_outcome(&chain)?;
        }
        self.judge(chain, tried?)
    }

    /// The wait ended, with the level (`taken`) or without it: without it, what its tries may
    /// have left is taken back (a fair lock's place, a reentrant level).
    pub(super) fn end(self, taken: bool) {
        self.handoffs.end(taken);
        if taken {
            return;
        }
        let chain = self.chain.into_inner();
        let lock = self.lock;
        if self.queued.get() && lock.kind.queue_place().is_some() {
            lock.undo_given_up(&chain.holder, None);
        }
        if self.level_may_stand.get() {
            let level = TryOf {
                holder: &chain.holder,
                levels_held: chain.levels_held,
                upgrade: None,
                deadline_ms: 0,
            };
            lock.take_back(level, &"a wait that ended without it", Undoing::Now);
        }
    }

    /// The lock a release handed to `holder`, as a guard, unless the grant came too late to
    /// hold anything by this clock: then one handed in the process is taken back (and the
    /// wait goes on with a new chain), and a fair lock's grant is found by the try that
    /// follows in the same step, if it still stands, and given a fresh lease.
    fn take_handed(&self, holder: &str) -> Result<Option<Attempt<Guard<H>>>> {
        let Some((grant, from)) = self.handoffs.grant(self.lock, holder, self.terms.lease) else {
            return Ok(None);
        };
        match self.guard(holder, false, grant) {
            Ok(guard) => {
                self.lock.client.count_handoff();
                Ok(Some(Attempt::Taken(guard)))
            }
            Err(_) if from == Handed::Line => {
                self.lock.undo_given_up(holder, None);
                self.new_chain()?;
                Ok(Some(Attempt::Again))
            }
            Err(_) => Ok(None),
        }
    }

    /// A try whose outcome is unknown may still be undone by the cleanup thread, late: a
    /// later try must not be what that undo takes back. A new chain's try starts a new chain;
    /// a reentrant level's is taken back if the wait ends without the level.
    fn after_unknown_outcome(&self, chain: &Chain) -> Result<()> {
        match chain.levels_held {
            0 => self.new_chain(),
            _ => {
                self.level_may_stand.set(true);
                Ok(())
            }
        }
    }

    /// What a try's answer means for the wait.
    fn judge(&self, chain: Chain, tried: Tried) -> Result<Attempt<Guard<H>>> {
        let Tried {
            acquired,
            grant,
            upgrade,
        } = tried;
        let lock = self.lock;
        Ok(match acquired {
            Acquired::Taken { token } => {
                let upgrade = upgrade.as_deref();
                let grant = Granted {
                    token,
                    upgrade,
                    ..grant
                };
                self.guard_taken(chain, grant)?
            }
            Acquired::Held { ttl, counter } => {
                self.queued.set(true);
                self.handoffs.held(grant.sent_at, counter);
                Attempt::Held {
                    hint: self.pause_while_held(ttl),
                }
            }
            Acquired::Late { server_ms } => {
                // The try came after its deadline by the server's clock, and changed
                // nothing: the estimate of that clock was off, and is read anew.
                lock.client.server_time_was(server_ms);
                Attempt::Again
            }
            Acquired::ChainGone => {
                let watchdog = lock.client.watchdog();
                watchdog.chain_gone(&lock.watch_key(self.thread), &chain.holder);
                self.new_chain()?;
                Attempt::Again
            }
            Acquired::UpgradableGone => return Err(self.upgradable_gone(&chain.holder)),
        })
    }

    /// The try took a level: its guard, unless the level joined a chain given up here
    /// meanwhile, or came too late to hold anything; then the chain's hold is taken back and
    /// a new chain started, and the wait tries again (after a late grant, unless it was the
    /// third in a row: see [`Attempt::TooLate`]).
    fn guard_taken(&self, chain: Chain, grant: Granted<'_>) -> Result<Attempt<Guard<H>>> {
        let joins = chain.levels_held > 0;
        let no_guard = match self.guard(&chain.holder, joins, grant) {
            Ok(guard) => return Ok(Attempt::Taken(guard)),
            Err(no_guard) => no_guard,
        };
        self.lock.undo_given_up(&chain.holder, grant.upgrade);
        self.new_chain()?;
        Ok(match no_guard {
            NoGuard::Late => Attempt::TooLate(Error::LeaseSpent {
                name: self.lock.name().to_owned(),
                elapsed: grant.sent_at.elapsed(),
            }),
            NoGuard::ChainGone => Attempt::Again,
        })
    }

    /// The upgradable read an upgrade started from is gone: it is reported lost, and the
    /// upgrade ends with this error.
    fn upgradable_gone(&self, holder: &str) -> Error {
        let name = self.lock.name();
        let upgradable = names::upgradable_watch_key(name, self.thread);
        self.lock.client.watchdog().chain_gone(&upgradable, holder);
        Error::LockLost {
            name: name.to_owned(),
            reason: LostReason::NotHeldAnymore,
        }
    }

    /// How long the wait may sleep after a try that found the lock held for `ttl` more: until
    /// a release wakes it or the lease runs out; for a kind whose waiters poll, no longer
    /// than the back-off's next pause.
    fn pause_while_held(&self, ttl: Option<Duration>) -> Option<Duration> {
        let Some(back_off) = self.lock.kind.polls() else {
            return ttl;
        };
        // The first try that finds the lock held is followed by the subscription and another
        // try, not a pause (see `wait`): the pauses count from the second.
        let tries = self.held_tries.get();
        let pause = back_off.pause(tries.saturating_sub(1));
        self.held_tries.set(tries.saturating_add(1));
        Some(ttl.map_or(pause, |ttl| ttl.min(pause)))
    }

    /// The guard of a level of `holder` granted by `grant` (`joins`: a level of a chain held).
    fn guard(
        &self,
        holder: &str,
        joins: bool,
        grant: Granted<'_>,
    ) -> std::result::Result<Guard<H>, NoGuard> {
        let (lease, cancel) = (self.terms.lease, self.terms.cancel);
        let holder = holder.to_owned();
        self.lock
            .guard(holder, joins, lease, grant, cancel, &self.make)
    }

    /// Gives the chain up and starts a new one: it leaves the line of this process's
    /// waiters.
    fn new_chain(&self) -> Result<()> {
        self.handoffs.leave();
        *self.chain.borrow_mut() = self.lock.chain_to_join(self.thread)?;
        Ok(())
    }
}
