//! The shared "is this lease still ours?" state of one acquisition chain.
//!
//! A [`LeaseState`] is created by the first (non-reentrant) acquisition of a lock by a holder
//! and shared by its reentrant acquisitions and by the watchdog entry that renews it. The
//! watchdog marks it lost; guards read it and hand out signals that fire once it is lost.
//! No I/O here.

use std::sync::OnceLock;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::error::LostReason;

#[derive(Debug, Default)]
pub(crate) struct LeaseState {
    lost: OnceLock<LostReason>,
    /// For a fixed lease: when it runs out by the local clock (the lease counted from the
    /// moment the acquisition was sent).
    expires_at: Option<Instant>,
    signals: Mutex<Vec<Sender<LostReason>>>,
}

impl LeaseState {
    /// The state of a chain the watchdog keeps alive.
    pub(crate) fn renewed() -> Self {
        LeaseState::default()
    }

    /// The state of a chain with a fixed lease that runs out at `expires_at`.
    pub(crate) fn fixed(expires_at: Instant) -> Self {
        LeaseState {
            expires_at: Some(expires_at),
            ..LeaseState::default()
        }
    }

    /// Records the loss; the first call wins and wakes every signal. Answers whether this call
    /// was the first.
    pub(crate) fn mark_lost(&self, reason: LostReason) -> bool {
        if self.lost.set(reason).is_err() {
            return false;
        }
        for signal in self.signals.lock().drain(..) {
            let _ = signal.try_send(reason);
        }
        true
    }

    /// Why the lease is known to be gone, if it is.
    pub(crate) fn lost(&self) -> Option<LostReason> {
        if let Some(reason) = self.lost.get() {
            return Some(*reason);
        }
        match self.expires_at {
            Some(at) if Instant::now() >= at => Some(LostReason::LeaseExpired),
            _ => None,
        }
    }

    /// A receiver that gets the reason once the loss is recorded (at once if it already is).
    pub(crate) fn signal(&self) -> Receiver<LostReason> {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let mut signals = self.signals.lock();
        match self.lost.get() {
            Some(reason) => {
                let _ = sender.try_send(*reason);
            }
            None => signals.push(sender),
        }
        receiver
    }
}

/// A lock the watchdog gave up, as told to the manager's lost-lock callback.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostLock {
    /// The lock name.
    pub name: String,
    /// The holder id (`<client-id>:<thread-number>`) that held it.
    pub holder: String,
    /// Why it is known to be gone.
    pub reason: LostReason,
}
