//! The lock's side of handoffs inside a release: a waiting thread's place in the line of its
//! plain lock and a release's offer to the first in line (see
//! [`wait::line`](crate::client::wait::line)); a fair-lock waiter's grant, from the message on
//! its own channel.
//!
//! Touches the lock's own calls (its undo) and the client's lines; the release scripts that
//! hand the lock on are the protocol's.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use super::{Chain, Granted, RawLock};
use crate::client::call::replication::Acked;
use crate::client::pubsub::{Letterbox, Subscription};
use crate::client::wait::line::{self, Offer, Outcome, Place};
use crate::error::Result;
use crate::primitives::hold::handle::Lease;
use crate::protocol::lock as protocol;
use crate::protocol::ScriptCall;

/// What one wait keeps for the handoffs a release may make to it: its place in the line of
/// its plain or write lock, and for a fair lock the letterbox of its own channel and what its
/// last try that found the lock held said.
#[derive(Default)]
pub(super) struct Handoffs<'a> {
    place: RefCell<Option<LocalPlace<'a>>>,
    letters: Letterbox,
    /// When the last try that found the lock held was sent, and the fencing token counter
    /// it saw: a grant made after it has a larger token, and a lease that runs from no
    /// earlier than that send.
    held: Cell<Option<(Instant, Option<u64>)>>,
    /// The holder id whose channel the wait subscribed (a fair waiter hears grants on it).
    subscribed: RefCell<Option<String>>,
}

/// Where a grant came from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Handed {
    /// A release of this process, through the line: taken back if it cannot be used.
    Line,
    /// A fair lock's release, through the message on the waiter's channel: a try confirms it
    /// if it cannot be used as it is.
    Letter,
}

impl<'a> Handoffs<'a> {
    /// Subscribes the wait of `chain` (see `RawLock::subscribe`) and puts it in the line of
    /// its lock: the subscriptions to wait on.
    pub(super) fn subscribe(
        &self,
        lock: &'a RawLock,
        chain: &Chain,
        lease: Lease,
    ) -> Result<Vec<Subscription>> {
        let mut subscriptions = lock.subscribe(&chain.holder, &self.letters)?;
        *self.subscribed.borrow_mut() = Some(chain.holder.clone());
        // A level of a chain held already waits for nothing a release hands on; an upgrade
        // is not handed the write lock: its chain reads already.
        if chain.levels_held > 0 || chain.upgrade {
            return Ok(subscriptions);
        }
        if let Some((handed_on, place)) = lock.join_line(&chain.holder, lease) {
            subscriptions.push(handed_on);
            *self.place.borrow_mut() = Some(place);
        }
        Ok(subscriptions)
    }

    /// Whether a fair lock's release may grant the lock to `holder`: a wait hears grants on
    /// the channel it subscribed, which is that of the chain it started with (or of none yet:
    /// its try right after subscribing finds a grant it missed).
    pub(super) fn hears_grants_for(&self, holder: &str) -> bool {
        self.subscribed
            .borrow()
            .as_deref()
            .is_none_or(|subscribed| subscribed == holder)
    }

    /// A try sent at `sent_at` found the lock held, the fencing token counter at `counter`.
    pub(super) fn held(&self, sent_at: Instant, counter: Option<u64>) {
        self.held.set(Some((sent_at, counter)));
    }

    /// What a release handed the waiting chain `holder` of `lock`, if it did, and where it
    /// came from.
    pub(super) fn grant(
        &self,
        lock: &RawLock,
        holder: &str,
        lease: Lease,
    ) -> Option<(Granted<'static>, Handed)> {
        if let Some(grant) = self.letter(lock, holder, lease) {
            return Some((grant, Handed::Letter));
        }
        let handed = self.place.borrow().as_ref()?.place.as_ref()?.take_grant()?;
        let grant = Granted {
            token: handed.token,
            sent_at: handed.sent_at,
            acknowledged: None,
            upgrade: None,
        };
        Some((grant, Handed::Line))
    }

    /// The grant a fair lock's release made to `holder`, from the message kept in the
    /// letterbox, if it came after the last try that found the lock held and gave the whole
    /// `lease` asked for, and the lock's writes wait for no replica now (else the next try
    /// confirms it, and gives it that lease, behind its `WAIT`).
    fn letter(&self, lock: &RawLock, holder: &str, lease: Lease) -> Option<Granted<'static>> {
        let message = self.letters.take()?;
        if lock.client.waits_for_replicas(lock.name()) {
            return None;
        }
        let (token, lease_ms) = protocol::grant_of(&message, holder)?;
        let (held_at, counter) = self.held.get()?;
        if counter.is_none_or(|counter| token <= counter)
            || lease_ms < lease.millis_or(lock.client.watchdog_timeout_ms())
        {
            return None;
        }
        Some(Granted {
            token,
            sent_at: held_at,
            acknowledged: None,
            upgrade: None,
        })
    }

    /// The chain gives up waiting (a new chain takes over): it leaves the line.
    pub(super) fn leave(&self) {
        self.place.borrow_mut().take();
    }

    /// The wait ended: holding the lock by its chain (`taken`), or not.
    pub(super) fn end(&self, taken: bool) {
        let place = self.place.borrow_mut().take();
        if let (Some(place), true) = (place, taken) {
            place.kept();
        }
    }
}

/// A waiting thread's place in the line of its lock, which leaves the line when dropped and
/// takes back a hold it was handed and will not use.
struct LocalPlace<'a> {
    lock: &'a RawLock,
    place: Option<Place<'a>>,
}

impl LocalPlace<'_> {
    /// Leaves the line holding the lock by the place's chain.
    fn kept(mut self) {
        if let Some(place) = self.place.take() {
            place.kept();
        }
    }
}

impl Drop for LocalPlace<'_> {
    fn drop(&mut self) {
        let Some(place) = self.place.take() else {
            return;
        };
        let holder = place.holder().to_owned();
        if place.leave() {
            self.lock.undo_given_up(&holder, None);
        }
    }
}

impl RawLock {
    /// Whether this lock's waits accept a grant inside a release: a fair lock whose writes
    /// wait for no replica now (a grant would be an acquisition nobody checked them for).
    pub(super) fn accepts_grant(&self) -> bool {
        self.kind.queue_place().is_some() && !self.client.waits_for_replicas(self.name())
    }

    /// Puts the chain `holder` of a waiting thread in the line of its plain or write lock,
    /// with the lease it asks for: the place, and the subscription a release that hands it
    /// the lock wakes. `None` for the other kinds, or when handoffs are off.
    fn join_line(&self, holder: &str, lease: Lease) -> Option<(Subscription, LocalPlace<'_>)> {
        if !self.hands_off() {
            return None;
        }
        let lease_ms = self.key_ttl_ms(lease.millis_or(self.client.watchdog_timeout_ms()));
        let (subscription, waker) = Subscription::local();
        let place = self
            .client
            .handoffs()
            .join(self.name(), holder, lease_ms, waker);
        let place = LocalPlace {
            lock: self,
            place: Some(place),
        };
        Some((subscription, place))
    }

    /// Whether other threads of the manager wait for this lock in its line, so that a new
    /// chain's wait (with time left) is most likely to find it held.
    pub(super) fn line_is_waiting(&self, chain: &Chain, deadline: Option<Instant>) -> bool {
        chain.levels_held == 0
            && deadline.is_none_or(|deadline| deadline > Instant::now())
            && self.hands_off()
            && self.client.handoffs().has_waiters(self.name())
    }

    /// Whether releases of this lock hand it to waiting threads of the manager: a plain lock
    /// or a write lock whose writes wait for no replica now (a handed lock would be an
    /// acquisition nobody checked them for).
    fn hands_off(&self) -> bool {
        self.kind.hands_off()
            && self.client.handoffs().limit() > 0
            && !self.client.waits_for_replicas(self.name())
    }

    /// The waiting thread of this manager a release of the lock's last level may hand it to.
    pub(super) fn handoff_offer(&self) -> Option<Offer> {
        if !self.hands_off() {
            return None;
        }
        self.client.handoffs().offer(self.name())
    }

    /// Tells the waiting thread a release was offered to how the release (sent at `sent_at`)
    /// turned out, from its `answer`; takes back a hold it handed to a thread that stopped
    /// waiting meanwhile. A release that went unanswered may still run (it may be on its way
    /// to a stalled server): `again`, the same release without the handoff, is sent until
    /// answered, which it is after the first ran or instead of it (the first then finds the
    /// answer of the repeat, and does nothing); that answer settles the offer.
    pub(super) fn settle_offer(
        &self,
        offer: Offer,
        answer: &Result<Acked<redis::Value>>,
        sent_at: Instant,
        again: ScriptCall,
    ) {
        if let Ok(acked) = answer {
            return self.settle_with(offer, &acked.answer, sent_at);
        }
        offer.unknown();
        let lease = Duration::from_millis(offer.lease_ms());
        let what = format!(
            "lock {:?}: a release that may have handed it to {}",
            self.name(),
            offer.holder()
        );
        let until = Instant::now() + lease + self.client.outage_grace();
        let lock = self.clone();
        let then = move |answer: &redis::Value| lock.settle_with(offer, answer, sent_at);
        self.client.resend_then(what, again, until, then);
    }

    /// Settles `offer` by the `answer` of the release (or of its repeat) sent at `sent_at`.
    fn settle_with(&self, offer: Offer, answer: &redis::Value, sent_at: Instant) {
        let outcome = match protocol::handed(answer) {
            Some(token) => Outcome::Handed(line::Handed { token, sent_at }),
            None => Outcome::NotHanded,
        };
        let holder = offer.holder().to_owned();
        if offer.settle(outcome) {
            self.undo_given_up(&holder, None);
        }
    }
}
