//! The shared "is this lease still ours?" state of one acquisition chain.
//!
//! A [`LeaseState`] is created by the first (non-reentrant) acquisition of a lock by a holder
//! and shared by its reentrant acquisitions and by the watchdog entry that tracks it. It knows
//! when the lease runs out by the local monotonic clock (the watchdog moves that deadline on
//! with every renewal), the chain's fencing token (and an upgrade's try), whether it is at risk
//! (a renewal failed and none has succeeded since), and why the lock was lost once that is
//! known. The watchdog records risks and losses; guards read the state and hand out signals
//! that fire when they are recorded. No I/O here.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::error::{LostReason, RiskReason};

/// One chain's lease as this process knows it: its deadline, whether (and why) it is lost,
/// and the signals to fire then. (`pub` in a crate-private module: the guards'
/// crate-internal `Hold` trait names it.)
pub struct LeaseState {
    lost: OnceLock<LostReason>,
    /// The fencing token of the chain's first acquisition.
    token: u64,
    /// For an upgrade's chain, the id of the try whose grant it holds.
    upgrade: Option<Arc<str>>,
    inner: Mutex<Inner>,
}

/// Told once when a lease state records its loss (a multi-master lock watches its members).
pub(crate) type LossObserver = Box<dyn FnOnce(LostReason) + Send>;

/// Told every time a lease state's risk is raised or cleared (a multi-master lock watches its
/// members).
pub(crate) type RiskObserver = Arc<dyn Fn() + Send + Sync>;

struct Inner {
    /// When the lease runs out by the local clock unless it is renewed.
    deadline: Instant,
    /// Someone was told the lease had run out by that deadline (before the loss was
    /// recorded): a renewal read late does not bring it back.
    expiry_told: bool,
    /// Why the last renewal failed, while none has succeeded since.
    risk: Option<RiskReason>,
    signals: Vec<Sender<LostReason>>,
    observers: Vec<LossObserver>,
    /// Dropped with the loss, which disconnects their receivers.
    risk_signals: Vec<Sender<RiskChange>>,
    risk_observers: Vec<RiskObserver>,
    /// Someone asked the holder to let go.
    revocation_requested: bool,
    /// Fired once at the request; dropped with the loss.
    revocation_signals: Vec<Sender<()>>,
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
            upgrade: None,
            inner: Mutex::new(Inner {
                deadline: deadline(sent_at, lease),
                expiry_told: false,
                risk: None,
                signals: Vec::new(),
                observers: Vec::new(),
                risk_signals: Vec::new(),
                risk_observers: Vec::new(),
                revocation_requested: false,
                revocation_signals: Vec::new(),
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

    /// This state, for the chain of an upgrade granted to the try `upgrade`.
    pub(crate) fn of_upgrade(self, upgrade: Option<&str>) -> Self {
        LeaseState {
            upgrade: upgrade.map(Arc::from),
            ..self
        }
    }

    /// For an upgrade's chain, the id of the try whose grant it holds.
    pub(crate) fn upgrade(&self) -> Option<&str> {
        self.upgrade.as_deref()
    }

    /// Moves the deadline on to cover a lease of `lease` granted by a request sent at
    /// `sent_at`; never moves it back. Answers the deadline now in force.
    pub(crate) fn extend(&self, sent_at: Instant, lease: Duration) -> Instant {
        let mut inner = self.inner.lock();
        inner.deadline = inner.deadline.max(deadline(sent_at, lease));
        inner.deadline
    }

    /// Moves the deadline on for a renewal granted by a request sent at `sent_at` for
    /// `lease`, unless its holder was told meanwhile that the deadline had passed (a lost
    /// hold stays lost). Answers whether it did.
    pub(crate) fn renew(&self, sent_at: Instant, lease: Duration) -> bool {
        let mut inner = self.inner.lock();
        if inner.expiry_told {
            return false;
        }
        inner.deadline = inner.deadline.max(deadline(sent_at, lease));
        true
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
        inner.risk_signals.clear();
        inner.risk_observers.clear();
        inner.revocation_signals.clear();
        let observers = std::mem::take(&mut inner.observers);
        drop(inner);
        for observer in observers {
            observer(reason);
        }
        true
    }

    /// Records that a renewal failed for `reason` while the lease may still hold: the first
    /// failure since the last success raises the risk and tells its signals and observers.
    /// Answers whether this call raised it (not when it stood already, nor once lost).
    pub(crate) fn raise_risk(&self, reason: RiskReason) -> bool {
        self.set_risk(Some(reason))
    }

    /// Records that a renewal succeeded: a standing risk is cleared, and its signals and
    /// observers told. Answers whether this call cleared it.
    pub(crate) fn clear_risk(&self) -> bool {
        self.set_risk(None)
    }

    fn set_risk(&self, risk: Option<RiskReason>) -> bool {
        let mut inner = self.inner.lock();
        if self.lost.get().is_some() || inner.risk.is_some() == risk.is_some() {
            return false;
        }
        inner.risk = risk;
        let change = risk.map_or(RiskChange::Cleared, RiskChange::AtRisk);
        inner
            .risk_signals
            .retain(|signal| signal.send(change).is_ok());
        let observers = inner.risk_observers.clone();
        drop(inner);
        for observer in observers {
            observer();
        }
        true
    }

    /// Why the hold is at risk, while it is: a renewal failed and none has succeeded since.
    /// `None` once lost (the loss says more).
    pub(crate) fn risk(&self) -> Option<RiskReason> {
        let inner = self.inner.lock();
        inner.risk.filter(|_| self.lost.get().is_none())
    }

    /// A receiver that gets every change of the risk from now on (and, when the hold is at
    /// risk now, that first), and is disconnected once the loss is recorded.
    pub(crate) fn risk_signal(&self) -> Receiver<RiskChange> {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let mut inner = self.inner.lock();
        if self.lost.get().is_some() {
            return receiver; // its sender is gone: disconnected
        }
        if let Some(reason) = inner.risk {
            let _ = sender.send(RiskChange::AtRisk(reason));
        }
        inner.risk_signals.push(sender);
        receiver
    }

    /// Has `observer` told of every change of the risk until the loss is recorded (on the
    /// thread that records it, outside the state's lock).
    pub(crate) fn observe_risk(&self, observer: RiskObserver) {
        let mut inner = self.inner.lock();
        if self.lost.get().is_none() {
            inner.risk_observers.push(observer);
        }
    }

    /// Records that someone asked the holder to let go, and fires the revocation signals.
    /// Answers whether this call was the first (not once lost).
    pub(crate) fn request_revocation(&self) -> bool {
        let mut inner = self.inner.lock();
        if self.lost.get().is_some() || inner.revocation_requested {
            return false;
        }
        inner.revocation_requested = true;
        for signal in inner.revocation_signals.drain(..) {
            let _ = signal.try_send(());
        }
        true
    }

    /// Whether someone asked the holder to let go.
    pub(crate) fn is_revocation_requested(&self) -> bool {
        self.inner.lock().revocation_requested
    }

    /// A receiver that gets one message once someone asks the holder to let go (at once if
    /// someone has), and is disconnected once the loss is recorded.
    pub(crate) fn revocation_signal(&self) -> Receiver<()> {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let mut inner = self.inner.lock();
        if inner.revocation_requested {
            let _ = sender.try_send(());
        } else if self.lost.get().is_none() {
            inner.revocation_signals.push(sender);
        }
        receiver
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
        let mut inner = self.inner.lock();
        if Instant::now() < inner.deadline {
            return None;
        }
        inner.expiry_told = true;
        Some(LostReason::LeaseExpired)
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

/// A change of whether a hold is at risk, as a guard's
/// [`risk_signal`](crate::Guard::risk_signal) and the manager's
/// [`on_risk_change`](crate::LockManagerBuilder::on_risk_change) callback tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RiskChange {
    /// A renewal failed, for this reason, while the lease may still hold: the hold is certain
    /// only until its deadline ([`valid_for`](crate::Guard::valid_for)). The watchdog keeps
    /// trying; the hold is lost at the deadline unless a renewal succeeds first.
    AtRisk(RiskReason),
    /// A renewal succeeded again: the lease was extended as usual.
    Cleared,
}

/// A hold whose risk changed, as told to the manager's
/// [`on_risk_change`](crate::LockManagerBuilder::on_risk_change) callback.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RiskNotice {
    /// The lock name (a permit's semaphore name).
    pub name: String,
    /// The holder id of the chain (a permit's id).
    pub holder: String,
    /// The fencing token of the chain (0 for a permit, which has none).
    pub fencing_token: u64,
    /// What changed.
    pub change: RiskChange,
}

/// A hold whose holder was asked to let go, as told to the manager's
/// [`on_revocation_request`](crate::LockManagerBuilder::on_revocation_request) callback.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RevocationNotice {
    /// The lock name (an election's name for a leadership).
    pub name: String,
    /// The holder id of the chain asked.
    pub holder: String,
    /// The fencing token of the chain.
    pub fencing_token: u64,
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
