//! The shared "is this lease still ours?" state of one acquisition chain.
//!
//! A [`LeaseState`] is created by the first (non-reentrant) acquisition of a lock by a holder
//! and shared by its reentrant acquisitions and by the watchdog entry that tracks it. It knows
//! when the lease runs out by the local monotonic clock (the watchdog moves that deadline on
//! with every renewal), the chain's fencing token, and why the lock was lost once that is
//! known. The watchdog records
//! losses; guards read the state and hand out signals that fire once a loss is recorded.
//! No I/O here.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::error::LostReason;

/// One chain's lease as this process knows it: its deadline, whether (and why) it is lost,
/// and the signals to fire then. (`pub` in a crate-private module: the guards'
/// crate-internal `Hold` trait names it.)
pub struct LeaseState {
    lost: OnceLock<LostReason>,
    /// The fencing token of the chain's first acquisition.
    token: u64,
    inner: Mutex<Inner>,
}

/// Told once when a lease state records its loss (a multi-master lock watches its members).
pub(crate) type LossObserver = Box<dyn FnOnce(LostReason) + Send>;

struct Inner {
    /// When the lease runs out by the local clock unless it is renewed.
    deadline: Instant,
    signals: Vec<Sender<LostReason>>,
    observers: Vec<LossObserver>,
}

impl std::fmt::Debug for LeaseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseState")
            .field("lost", &self.lost.get())
            .field("deadline", &self.deadline())
            .field("token", &self.token())
            .finish_non_exhaustive()
    }
}

impl LeaseState {
    /// The state of a chain whose lease of `lease` and fencing `token` were granted by a
    /// request sent at `sent_at`.
    pub(crate) fn new(sent_at: Instant, lease: Duration, token: u64) -> Self {
        LeaseState {
            lost: OnceLock::new(),
            token,
            inner: Mutex::new(Inner {
                deadline: deadline(sent_at, lease),
                signals: Vec::new(),
                observers: Vec::new(),
            }),
        }
    }

    /// When the lease runs out by the local clock.
    pub(crate) fn deadline(&self) -> Instant {
        self.inner.lock().deadline
    }

    /// The fencing token of the chain's first acquisition.
    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    /// Moves the deadline on to cover a lease of `lease` granted by a request sent at
    /// `sent_at`; never moves it back. Answers the deadline now in force.
    pub(crate) fn extend(&self, sent_at: Instant, lease: Duration) -> Instant {
        let mut inner = self.inner.lock();
        inner.deadline = inner.deadline.max(deadline(sent_at, lease));
        inner.deadline
    }

    /// Records the loss; the first call wins and wakes every signal. Answers whether this call
    /// was the first.
    pub(crate) fn mark_lost(&self, reason: LostReason) -> bool {
        // The signals are taken under the same lock `signal` registers them under, so none
        // registered after the loss is recorded is missed.
        let mut inner = self.inner.lock();
        if self.lost.set(reason).is_err() {
            return false;
        }
        for signal in inner.signals.drain(..) {
            let _ = signal.try_send(reason);
        }
        let observers = std::mem::take(&mut inner.observers);
        drop(inner);
        for observer in observers {
            observer(reason);
        }
        true
    }

    /// Has `observer` told of the loss once it is recorded (at once if it already is).
    pub(crate) fn observe(&self, observer: LossObserver) {
        let mut inner = self.inner.lock();
        match self.lost.get() {
            Some(reason) => {
                let reason = *reason;
                drop(inner);
                observer(reason);
            }
            None => inner.observers.push(observer),
        }
    }

    /// Whether a loss has been recorded (by the watchdog or a force-release notice).
    pub(crate) fn is_marked_lost(&self) -> bool {
        self.lost.get().is_some()
    }

    /// Why the lease is known to be gone, if it is: the recorded reason, or
    /// [`LostReason::LeaseExpired`] once the deadline has passed, even before the watchdog
    /// thread has noticed.
    pub(crate) fn lost(&self) -> Option<LostReason> {
        if let Some(reason) = self.lost.get() {
            return Some(*reason);
        }
        (Instant::now() >= self.deadline()).then_some(LostReason::LeaseExpired)
    }

    /// A receiver that gets the reason once the loss is recorded (at once if it already is).
    pub(crate) fn signal(&self) -> Receiver<LostReason> {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let mut inner = self.inner.lock();
        match self.lost.get() {
            Some(reason) => {
                let _ = sender.try_send(*reason);
            }
            None => inner.signals.push(sender),
        }
        receiver
    }
}

/// The local end of a lease granted by a request sent at `sent_at`.
///
/// Redis starts the lease when the request arrives, which is after `sent_at`, so counting from
/// `sent_at` errs on the safe side. The clocks of the two machines may also run at slightly
/// different rates: the same allowance as Redlock's (1 % of the lease plus 2 ms) is taken off.
pub(crate) fn deadline(sent_at: Instant, lease: Duration) -> Instant {
    sent_at + lease.saturating_sub(clock_drift(lease))
}

/// The clock drift allowed over a lease of `lease`: 1 % plus 2 ms.
pub(crate) fn clock_drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// A lock found lost, as told to the manager's lost-lock callback.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostLock {
    /// The lock name.
    pub name: String,
    /// The holder id (`<client-id>:<chain-number>`, unique to the acquisition chain) that held
    /// it: a guard's [`holder_id`](crate::LockGuard::holder_id).
    pub holder: String,
    /// The fencing token of the acquisition chain that held it (0 for a permit, which has
    /// none): a guard's [`fencing_token`](crate::LockGuard::fencing_token).
    pub fencing_token: u64,
    /// Why it is known to be gone.
    pub reason: LostReason,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_allows_for_drift_and_only_moves_on() {
        let start = Instant::now();
        let state = LeaseState::new(start, Duration::from_secs(10), 1);
        assert_eq!(state.deadline(), start + Duration::from_millis(9_898));
        state.extend(start, Duration::from_secs(1));
        assert_eq!(state.deadline(), start + Duration::from_millis(9_898));
        let later = start + Duration::from_secs(5);
        assert_eq!(
            state.extend(later, Duration::from_secs(10)),
            later + Duration::from_millis(9_898)
        );
        assert_eq!(state.lost(), None);
    }

    #[test]
    fn a_passed_deadline_reads_as_expired_and_the_first_recorded_reason_wins() {
        // A lease shorter than the drift allowance has run out as soon as it is granted.
        let state = LeaseState::new(Instant::now(), Duration::from_millis(1), 1);
        assert_eq!(state.lost(), Some(LostReason::LeaseExpired));
        assert!(!state.is_marked_lost());
        let signal = state.signal();
        assert!(state.mark_lost(LostReason::ForceReleased));
        assert!(!state.mark_lost(LostReason::NotHeldAnymore));
        assert_eq!(signal.try_recv(), Ok(LostReason::ForceReleased));
        assert_eq!(state.lost(), Some(LostReason::ForceReleased));
        assert_eq!(state.signal().try_recv(), Ok(LostReason::ForceReleased));
    }
}
