//! The lock's side of handoffs inside a release: a waiting thread's place in the line of its
//! plain lock and a release's offer to the first in line (see
//! [`wait::handoff`](crate::wait::handoff)); a fair-lock waiter's grant, from the message on
//! its own channel.
//!
//! Touches the lock's own calls (its undo) and the client's lines; the release scripts that
//! hand the lock on are the protocol's.

use std::time::{Duration, Instant};

use super::{Granted, RawLock};
use crate::call::replication::Acked;
use crate::client::Undoing;
use crate::error::{Error, Result};
use crate::hold::handle::Lease;
use crate::protocol::lock as protocol;
use crate::protocol::names::LockKind;
use crate::protocol::ScriptCall;
use crate::pubsub::{Letterbox, Subscription};
use crate::wait::handoff::{Handed, Offer, Outcome, Place};

/// A waiting thread's place in the line of its plain lock, which leaves the line when
/// dropped and takes back a hold it was handed and will not use.
pub(super) struct LocalPlace<'a> {
    lock: &'a RawLock,
    place: Option<Place<'a>>,
}

impl<'a> LocalPlace<'a> {
    /// What a release handed the waiter, as a grant of its chain, if it did.
    pub(super) fn take_grant(&self) -> Option<Granted> {
        let handed = self.place.as_ref()?.take_grant()?;
        Some(Granted {
            token: handed.token,
            sent_at: handed.sent_at,
            acknowledged: None,
        })
    }

    /// Leaves the line holding the lock by the place's chain.
    pub(super) fn kept(mut self) {
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
    /// Whether this lock's waits accept a grant inside a release: a fair lock, without
    /// replica acknowledgements (a grant would be an acquisition nobody checked them for).
    pub(super) fn accepts_grant(&self) -> bool {
        matches!(self.keys.kind, LockKind::Fair { .. }) && self.client.replica_acks().is_none()
    }

    /// The grant a fair lock's release made to the waiting chain `holder`, from the message
    /// kept in `letters`, if it came and gave the whole `lease` asked for (else the next try
    /// confirms it, and gives it that lease). Its lease runs from `held_at`, when the last try
    /// that found the lock held was sent: the grant came after that try ran.
    pub(super) fn fair_grant(
        &self,
        letters: &Letterbox,
        holder: &str,
        lease: Lease,
        held_at: Option<Instant>,
    ) -> Option<Granted> {
        if !self.accepts_grant() {
            return None;
        }
        let message = letters.take()?;
        let (token, lease_ms) = protocol::grant_of(&message, holder)?;
        if lease_ms < lease.millis_or(self.client.watchdog_timeout_ms()) {
            return None;
        }
        Some(Granted {
            token,
            sent_at: held_at?,
            acknowledged: None,
        })
    }

    /// Puts the chain `holder` of a waiting thread in the line of its plain or write lock,
    /// with the lease it asks for: the place, and the subscription a release that hands it
    /// the lock wakes. `None` for the other kinds, or when handoffs are off.
    pub(super) fn join_line(
        &self,
        holder: &str,
        lease: Lease,
    ) -> Option<(Subscription, LocalPlace<'_>)> {
        if !self.hands_off() {
            return None;
        }
        let lease_ms = lease.millis_or(self.client.watchdog_timeout_ms());
        let (subscription, waker) = Subscription::local();
        let place = self
            .client
            .handoffs()
            .join(self.name(), holder, lease_ms, waker)?;
        let place = LocalPlace {
            lock: self,
            place: Some(place),
        };
        Some((subscription, place))
    }

    /// Whether other threads of the manager wait for this lock in its line.
    pub(super) fn line_is_waiting(&self) -> bool {
        self.hands_off() && self.client.handoffs().has_waiters(self.name())
    }

    /// Whether releases of this lock hand it to waiting threads of the manager: a plain lock
    /// or a write lock, without replica acknowledgements (a handed lock would be an
    /// acquisition nobody checked them for).
    fn hands_off(&self) -> bool {
        matches!(self.keys.kind, LockKind::Plain | LockKind::Write)
            && self.client.replica_acks().is_none()
            && self.client.handoffs().limit() > 0
    }

    /// The waiting thread of this manager a release of the lock's last level may hand it to.
    pub(super) fn handoff_offer(&self) -> Option<Offer> {
        if !self.hands_off() {
            return None;
        }
        self.client.handoffs().offer(self.name())
    }

    /// Tells the waiting thread a release was offered to what the release `answer`ed (a
    /// release sent at `sent_at`); takes back a hold it handed to a thread that has stopped
    /// waiting. When the release went unanswered and may still run (it may be on its way to
    /// a stalled server), the same release is sent again `taking_back` that thread's hold,
    /// until answered: it runs after the first, or keeps the first from doing anything.
    pub(super) fn settle_offer(
        &self,
        offer: Offer,
        answer: &Result<Acked<redis::Value>>,
        sent_at: Instant,
        taking_back: impl FnOnce(&str) -> ScriptCall,
    ) {
        let outcome = match answer {
            Ok(acked) => match protocol::handed(&acked.answer) {
                Some(token) => Outcome::Handed(Handed { token, sent_at }),
                None => Outcome::NotHanded,
            },
            Err(err) if err.may_have_run() || matches!(err, Error::Indeterminate { .. }) => {
                Outcome::Unknown
            }
            Err(_) => Outcome::NotHanded,
        };
        let unknown = matches!(outcome, Outcome::Unknown);
        let holder = offer.holder().to_owned();
        let lease = Duration::from_millis(offer.lease_ms());
        if !offer.settle(outcome) {
            return;
        }
        if !unknown {
            return self.undo_given_up(&holder, None);
        }
        let what = || {
            format!(
                "lock {:?}: a handoff to {holder}, who stopped waiting",
                self.name()
            )
        };
        let until = Instant::now() + lease + self.client.outage_grace();
        self.client
            .undo(Undoing::Later, what, taking_back(&holder), until);
    }
}
