//! The watchdog: one thread per manager that keeps the leases of held locks alive, finds out
//! as early as it can when one is lost, and deletes the receipts that releases leave behind.
//!
//! Its parts:
//! - [`registry`]: the entries, one per acquisition chain held in this process, keyed by a
//!   key of the primitive's making: the lock name and the holding thread (read levels too),
//!   the permit's id; never by name alone, so that a grant that should not have been (a
//!   demoted master's) cannot stand in for another thread's hold; each with its kind of
//!   hold, holder, thread, reentrant levels and the shared [`LeaseState`];
//! - [`schedule`]: when each entry is next looked at: renewals batched by tick, lease-end
//!   checks to the instant, and whether new work must wake the thread;
//! - [`renewal`]: the I/O, one pipeline of batched script calls per batch, however many locks
//!   and of whatever kinds, with the queued receipt deletions;
//! - [`receipts`]: the release receipts queued for deletion;
//! - [`risk`]: raising and clearing a chain's risk as its renewals fail and succeed, and
//!   telling the log and the risk callback;
//! - [`loss`]: marking chains lost and telling the log and the lost-lock callback;
//! - [`revocation`]: marking chains asked to let go (a revocation request heard by the
//!   pub/sub listener) and telling the log and the revocation callback.
//!
//! This file holds the [`Watchdog`] facade the rest of the crate calls, and the thread loop
//! that ties the parts together under one state lock (the receipt queue has its own).
//!
//! A lock is given up, its [`LeaseState`] marked lost and the lost-lock callback told, when:
//! - a renewal answers that the holder is gone ([`LostReason::NotHeldAnymore`]);
//! - the lease deadline passes by the local monotonic clock before a renewal succeeded,
//!   whether Redis is unreachable or this process was paused ([`LostReason::LeaseExpired`]);
//! - the pub/sub listener hears a force-release notice for it
//!   ([`LostReason::ForceReleased`], see [`NoticeSink::force_released`]).
//!
//! A failed renewal is retried until the deadline, so an outage shorter than the lease is not
//! a loss: it raises the chain's risk ([`RiskReason`](crate::RiskReason)), which the next
//! renewal that succeeds clears. With replica acknowledgements on, a renewal that fewer
//! replicas than asked acknowledged in time is still a renewal (the master extended the
//! lease): it is counted and reported in the log, and the lock kept.
//!
//! An entry is removed *before* its last release is sent, and a release waits for a
//! renewal of its entry that is already in flight, so no renewal is sent after a release.
//! (One that timed out may still sit unread in a stalled server's input; run later, it finds
//! the holder gone and does nothing. So does the renewal of a chain that was lost, and whose
//! entry a new chain of its thread replaced, while the renewal was on the wire: its release
//! does not wait for it.)
//!
//! This module talks to Redis only through the router and its pools (the call layer), and
//! only from its own thread; the callback runs on that thread too. Its locks are
//! [`client::sync`](crate::client::sync)'s, so that the steps of the threads that call it
//! are searched in random orders under the unit tests (`schedules`, run by `shuttle`),
//! with the thread's rounds played by the search (its sleep and wakes are not searched).

pub(crate) mod lease;
mod loss;
mod receipts;
mod registry;
mod renewal;
mod revocation;
mod risk;
mod schedule;
#[cfg(test)]
mod schedules;
mod wheel;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::client::call::replication::{AckSetting, ShortfallLog, Unreplicated};
use crate::client::call::route::Router;
use crate::client::stats::{Histogram, Percentiles};
use crate::client::sync::{Condvar, Mutex, MutexGuard};
use crate::client::watchdog::lease::{LeaseState, LostLock, RevocationNotice, RiskNotice};
use crate::error::{Error, LostReason, Result};
use crate::protocol::renew::HoldKind;
use loss::{LossReports, LostCounts};
use receipts::{Queued, ReceiptQueue};
use registry::{Entry, Registry, Slot};
use renewal::{AckWait, Due, Outcome, Renewal};
use revocation::RevocationReports;
use risk::{RiskCounts, RiskReports};
use schedule::{earliest, DueNow, Schedule};

/// What an acquisition got from Redis.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant<'a> {
    /// The fencing token the server answered.
    pub(crate) token: u64,
    /// The acquisition entered a chain this process holds (it sent the chain's levels), rather
    /// than starting a new one.
    pub(crate) joins: bool,
    /// For an upgrade (the write lock taken by the upgradable reader) that starts a chain,
    /// the id of the try the server granted: the chain's releases name it.
    pub(crate) upgrade: Option<&'a str>,
}

impl Grant<'static> {
    /// A grant of `token` that is no upgrade's (`joins`: it entered a chain held here).
    pub(crate) fn of(token: u64, joins: bool) -> Self {
        Grant {
            token,
            joins,
            upgrade: None,
        }
    }
}

/// A hold to watch: one level of an acquisition chain.
pub(crate) struct Holding<'a> {
    /// The registry key: a key of the primitive's making, unique to the chain's name and
    /// thread, or to its permit.
    pub(crate) key: &'a str,
    /// The name of the primitive.
    pub(crate) name: &'a str,
    /// The chain's holder id (a permit's id).
    pub(crate) holder: &'a str,
    /// How it is renewed.
    pub(crate) kind: HoldKind,
    /// The number of the thread that holds it.
    pub(crate) thread: u64,
}

/// Called with every lock found lost.
pub(crate) type LostCallback = Arc<dyn Fn(&LostLock) + Send + Sync>;

/// Called with every hold raised at risk or cleared.
pub(crate) type RiskCallback = Arc<dyn Fn(&RiskNotice) + Send + Sync>;

/// Called with every hold whose holder was asked to let go.
pub(crate) type RevocationCallback = Arc<dyn Fn(&RevocationNotice) + Send + Sync>;

/// Runs the manager's `what` callback about the lock `name`: a panic in it is logged, and must
/// not take the renewal of every other lock down.
fn call_contained(what: &str, name: &str, callback: impl FnOnce()) {
    let call = std::panic::AssertUnwindSafe(callback);
    if std::panic::catch_unwind(call).is_err() {
        log::error!("the {what} callback panicked for {name:?}");
    }
}

/// What the manager's callbacks are told, on the watchdog thread.
#[derive(Clone, Default)]
pub(crate) struct Callbacks {
    pub(crate) on_lost: Option<LostCallback>,
    pub(crate) on_risk: Option<RiskCallback>,
    pub(crate) on_revocation: Option<RevocationCallback>,
}

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// A cheap handle for the pub/sub listener to report force-release notices with.
#[derive(Clone)]
pub(crate) struct NoticeSink(Arc<Shared>);

struct Shared {
    state: Mutex<State>,
    /// Release receipts to delete. Taken after `state` when both are held, never before.
    receipts: Mutex<ReceiptQueue>,
    /// Wakes the watchdog thread: work arrived, a loss is to be told, or it must stop.
    work_arrived: Condvar,
    /// Wakes releases waiting for an in-flight renewal of their entry.
    renewal_done: Condvar,
    router: Arc<Router>,
    timeout: Duration,
    /// The timeout in whole milliseconds, rounded up as for acquisitions.
    timeout_ms: u64,
    interval: Duration,
    callbacks: Callbacks,
    /// What each renewal pipeline waits for at its end, if anything.
    acks: Option<AckSetting>,
    unreplicated_log: ShortfallLog,
    /// How long the renewal batches took, from their send to their last answer.
    renewal_times: Histogram,
}

struct State {
    registry: Registry,
    schedule: Schedule,
    losses: LossReports,
    risks: RiskReports,
    revocations: RevocationReports,
    renewals: RenewalCounts,
    stopping: bool,
}

/// How the renewals have gone so far.
#[derive(Clone, Copy, Default)]
struct RenewalCounts {
    sent: u64,
    failed: u64,
    batches: u64,
    /// Renewed, but short of replica acknowledgements.
    unreplicated: u64,
}

/// The watchdog's counters, for the stats.
pub(crate) struct WatchdogCounts {
    /// Chains watched now.
    pub(crate) held: usize,
    pub(crate) renewals_sent: u64,
    pub(crate) renewals_failed: u64,
    pub(crate) renewal_batches: u64,
    pub(crate) renewals_unreplicated: u64,
    /// Chains lost, by reason.
    pub(crate) lost: LostCounts,
    /// Chains at risk now.
    pub(crate) at_risk: usize,
    /// Risks raised and cleared so far.
    pub(crate) risks: RiskCounts,
    /// Chains asked to let go so far.
    pub(crate) revocations_requested: u64,
    /// How long the chains ended so far were held.
    pub(crate) hold_times: Percentiles,
    /// How long the renewal batches took.
    pub(crate) renewal_times: Percentiles,
}

/// What the watchdog thread does next.
enum Work {
    /// Tell these risk changes, revocation requests, then losses, to the log and the
    /// callbacks.
    Tell(Vec<RiskNotice>, Vec<RevocationNotice>, Vec<LostLock>),
    /// Renew these locks (possibly none) and delete these receipts, first sent at `sent_at`,
    /// with answers read no later than `answer_by`, and the answer of the `WAIT` for replica
    /// acknowledgements (when on) no later than `acks_by`.
    Renew {
        batch: Vec<Renewal>,
        receipts: Vec<String>,
        sent_at: Instant,
        answer_by: Instant,
        acks_by: Instant,
    },
}

/// When a batch of renewals was sent, when its outcomes are recorded, and how long after
/// that a failed renewal is tried again.
#[derive(Clone, Copy)]
struct Times {
    sent_at: Instant,
    now: Instant,
    retry_delay: Duration,
}

/// A level ended: the levels its chain has left in this process, the chain's holder id, and
/// its lease state (its fencing token, an upgrade's try).
pub(crate) struct Unwatched {
    pub(crate) left: LevelsLeft,
    pub(crate) holder: Arc<str>,
    pub(crate) lease: Arc<LeaseState>,
}

/// The levels of a chain left in this process after one ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LevelsLeft {
    /// Levels the watchdog renews.
    pub(crate) renewed: u32,
    /// Levels with a fixed lease.
    pub(crate) fixed: u32,
}

impl LevelsLeft {
    /// Whether the watchdog still renews the lock.
    pub(crate) fn is_watched(&self) -> bool {
        self.renewed > 0
    }

    /// How many levels the holder still holds.
    pub(crate) fn total(&self) -> u32 {
        self.renewed + self.fixed
    }
}

impl Watchdog {
    pub(crate) fn start(
        router: Arc<Router>,
        timeout: Duration,
        acks: Option<AckSetting>,
        callbacks: Callbacks,
    ) -> Result<Self> {
        let shared = Arc::new(Shared::new(router, timeout, acks, callbacks)?);
        let thread = std::thread::Builder::new()
            .name("redlease-watchdog".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || shared.run()
            })
            .map_err(Error::ThreadSpawn)?;
        Ok(Watchdog {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// The timeout in whole milliseconds, rounded up as for acquisitions: the lease scripts
    /// give watched locks.
    pub(crate) fn timeout_ms(&self) -> u64 {
        self.shared.timeout_ms
    }

    /// A handle for reporting force-release notices.
    pub(crate) fn notice_sink(&self) -> NoticeSink {
        NoticeSink(Arc::clone(&self.shared))
    }

    /// Tracks one more level of `holding`, as `grant`ed by a request sent at `sent_at`:
    /// renewed by the watchdog, or with a `fixed` lease that is only watched until it runs
    /// out. A level of the chain already tracked under the key joins it; a fresh acquisition
    /// starts a new chain (and an older chain of the same thread under the key, which must
    /// have been lost, is reported lost; another thread's chain of the same name is left to
    /// its own renewals). Answers the lease state of the chain and its fencing token; `None`
    /// when the grant joined a chain that is lost or gone here by now (its lease ran out
    /// while the answer was on its way): the level belongs to no live chain, and its holder
    /// id must not start one.
    pub(crate) fn watch(
        &self,
        holding: Holding<'_>,
        grant: Grant<'_>,
        sent_at: Instant,
        fixed: Option<Duration>,
    ) -> Option<(Arc<LeaseState>, u64)> {
        let key = holding.key;
        let shared = &*self.shared;
        let level = Level {
            sent_at,
            lease: fixed.unwrap_or(shared.timeout),
            fixed: fixed.is_some(),
            interval: shared.interval,
        };
        let mut state = shared.state.lock();
        let state = &mut *state;
        let mut wake = false;
        if let Some((slot, entry)) = state.registry.find_mut(key) {
            if &*entry.holder == holding.holder && entry.lease.lost().is_none() {
                // A level taken through a handle with a longer lock delay gives the chain
                // its delay: the key kept it, and renewals keep it.
                entry.kind = entry.kind.joined_by(holding.kind);
                let (joined, wake) = state.add_level(slot, level);
                if wake {
                    shared.work_arrived.notify_one();
                }
                return joined;
            }
            if grant.joins {
                return None;
            }
            // A chain this process no longer holds: another chain took the lock after it was
            // lost (before the loss was noticed).
            let reason = entry.lease.lost().unwrap_or(LostReason::NotHeldAnymore);
            state.lose(key, reason);
            wake = true; // to tell the callback
        } else if grant.joins {
            return None;
        }
        let (started, woke) = state.start_chain(&holding, grant, level);
        if wake || woke {
            shared.work_arrived.notify_one();
        }
        Some(started)
    }

    /// The chain under `key` by which `thread` holds it, unless it is known to be lost: its
    /// holder id and how many levels it has.
    pub(crate) fn chain_of(&self, key: &str, thread: u64) -> Option<(Arc<str>, u32)> {
        let state = self.shared.state.lock();
        let entry = state.registry.get(key)?;
        (entry.thread == thread && entry.lease.lost().is_none())
            .then(|| (Arc::clone(&entry.holder), entry.levels()))
    }

    /// Records that the chain `holder` under `key` is gone, as an acquisition found: it is
    /// reported lost ([`LostReason::NotHeldAnymore`]).
    pub(crate) fn chain_gone(&self, key: &str, holder: &str) {
        let mut state = self.shared.state.lock();
        if state
            .registry
            .get(key)
            .is_some_and(|entry| &*entry.holder == holder)
        {
            state.lose(key, LostReason::NotHeldAnymore);
            self.shared.work_arrived.notify_one();
        }
    }

    /// Ends one level of the chain `lease` under `key` (a `fixed`-lease level or a renewed
    /// one). The last level removes the entry, after any renewal of it in flight has come
    /// back. Answers the levels the chain has left (none when it is not tracked any more).
    pub(crate) fn unwatch(&self, key: &str, lease: &Arc<LeaseState>, fixed: bool) -> LevelsLeft {
        self.end_level(key, |entry| Arc::ptr_eq(&entry.lease, lease), Some(fixed))
            .map_or_else(LevelsLeft::default, |ended| ended.left)
    }

    /// Like [`unwatch`](Watchdog::unwatch), for a level of `thread`'s chain whose guard is
    /// gone: a renewed level if there is one, else a fixed one. Also answers the chain's
    /// holder id and lease state; `None` when `thread` has no chain under `key` here.
    pub(crate) fn unwatch_thread(&self, key: &str, thread: u64) -> Option<Unwatched> {
        self.end_level(key, |entry| entry.thread == thread, None)
    }

    /// Ends one level of the chain under `key` that `is_ours` (a `fixed`-lease one, a renewed
    /// one, or with `None` a renewed one if there is one, else a fixed one): see
    /// [`unwatch`](Watchdog::unwatch).
    fn end_level(
        &self,
        key: &str,
        is_ours: impl Fn(&Entry) -> bool,
        fixed: Option<bool>,
    ) -> Option<Unwatched> {
        let shared = &*self.shared;
        let mut state = shared.state.lock();
        let State {
            registry, schedule, ..
        } = &mut *state;
        let (slot, entry) = registry.find_mut(key).filter(|(_, entry)| is_ours(entry))?;
        let left = entry.end_level(fixed.unwrap_or(entry.renewed_levels == 0));
        let ended = Unwatched {
            left,
            holder: Arc::clone(&entry.holder),
            lease: Arc::clone(&entry.lease),
        };
        if left.renewed > 0 {
            return Some(ended);
        }
        if left.fixed > 0 {
            // Fixed-lease levels remain and nothing renews them: watch their deadline. (The
            // release of this level gives them at least the watchdog timeout; the deadline
            // kept here is older, so it errs on the safe side.)
            if schedule.lease_end(slot, entry) {
                shared.work_arrived.notify_one();
            }
            return Some(ended);
        }
        let held = self.remove_once_settled(&mut state, key, is_ours);
        drop(state);
        if let Some(held) = held {
            crate::client::telemetry::held(held);
        }
        Some(ended)
    }

    /// Removes the entry under `key`, if it still `is_ours`, once a renewal of it in flight
    /// has come back (no renewal of a chain is sent after its release), or once the wait
    /// for it passes twice the response timeout and a second, with a warning. Answers how
    /// long its chain was held, if it removed it.
    fn remove_once_settled(
        &self,
        state: &mut MutexGuard<'_, State>,
        key: &str,
        is_ours: impl Fn(&Entry) -> bool,
    ) -> Option<Duration> {
        let shared = &*self.shared;
        // A renewal reads its answers for at most the response timeout (it is applied before
        // any `WAIT` behind it is read); the bound only guards against a bug.
        let give_up_at =
            Instant::now() + shared.router.response_timeout() * 2 + Duration::from_secs(1);
        let renewing = |state: &State| {
            state
                .registry
                .get(key)
                .is_some_and(|entry| is_ours(entry) && entry.renewing)
        };
        while renewing(state) {
            if shared
                .renewal_done
                .wait_until(state, give_up_at)
                .timed_out()
            {
                log::warn!("lock {key:?}: released while its renewal is still unanswered");
                break;
            }
        }
        let held = match state.registry.get(key).is_some_and(&is_ours) {
            true => state.registry.remove(key),
            false => None,
        };
        let State {
            registry, schedule, ..
        } = &mut **state;
        schedule.compact(registry);
        held
    }

    /// Queues the receipt key a release left, once its answer has arrived, for deletion with
    /// the next renewal batch, or alone within one renewal interval. Never waits for I/O, and
    /// wakes the thread only when it would otherwise sleep past the time the keys are due.
    pub(crate) fn discard_receipt(&self, key: String) {
        let shared = &*self.shared;
        // The receipt lock is let go before the state lock is taken: the thread takes them the
        // other way round.
        let queued = shared.receipts.lock().push(key, Instant::now);
        let due = match queued {
            Queued::Joined => return,
            Queued::First { flush_by } => flush_by,
            Queued::Overflowing => Instant::now(),
        };
        // The thread reads the receipt queue under the state lock before it sleeps, so either it
        // saw this key or it is asleep by now with its wake-up on record.
        if shared.state.lock().schedule.wakes_too_late_for(due) {
            shared.work_arrived.notify_one();
        }
    }

    /// How many locks the watchdog renews or watches now.
    pub(crate) fn len(&self) -> usize {
        self.shared.state.lock().registry.len()
    }

    /// The counters, read under the state lock once.
    pub(crate) fn counts(&self) -> WatchdogCounts {
        let state = self.shared.state.lock();
        WatchdogCounts {
            held: state.registry.len(),
            renewals_sent: state.renewals.sent,
            renewals_failed: state.renewals.failed,
            renewal_batches: state.renewals.batches,
            renewals_unreplicated: state.renewals.unreplicated,
            lost: state.losses.counts(),
            at_risk: state.registry.at_risk(),
            risks: state.risks.counts(),
            revocations_requested: state.revocations.count(),
            hold_times: state.registry.hold_times(),
            renewal_times: self.shared.renewal_times.percentiles(),
        }
    }

    /// Stops and joins the thread. Held locks are no longer renewed and run out by their
    /// lease; the receipts still queued are deleted as the thread stops (within a response
    /// timeout; left to their TTL when Redis cannot be reached).
    pub(crate) fn stop(&self) {
        self.shared.state.lock().stopping = true;
        self.shared.work_arrived.notify_all();
        if let Some(thread) = self.thread.lock().take() {
            if thread.thread().id() == std::thread::current().id() {
                return; // stopped from a lost-lock callback: the loop ends when it returns
            }
            if thread.join().is_err() {
                log::error!("the watchdog thread panicked");
            }
        }
    }
}

impl NoticeSink {
    /// Someone force-released `name` while `holder` held it and its token counter stood at
    /// `token` (0 when unknown): if that is a chain in this process, it is lost. (Holder ids
    /// are unique to a chain; the token is checked too for notices from older versions,
    /// whose holder ids were the same for every chain of a thread.)
    pub(crate) fn force_released(&self, name: &str, holder: &str, token: u64) {
        let shared = &*self.0;
        let mut state = shared.state.lock();
        // Held once per process, the name is the key; a thread's read levels and its
        // upgradable read are keyed otherwise: look for all.
        let keys = state.registry.find_all(name, holder);
        let mut lost_any = false;
        for key in keys {
            let ours = state.registry.get(&key).is_some_and(|entry| {
                !entry.lease.is_marked_lost() && (token == 0 || token >= entry.lease.token())
            });
            if ours {
                state.lose(&key, LostReason::ForceReleased);
                lost_any = true;
            }
        }
        if lost_any {
            shared.work_arrived.notify_one();
        }
    }

    /// Someone asked `holder` to let go of `name`: if that is a chain in this process, its
    /// guard is told, and the revocation callback.
    pub(crate) fn revocation_requested(&self, name: &str, holder: &str) {
        let shared = &*self.0;
        let mut state = shared.state.lock();
        let State {
            registry,
            revocations,
            ..
        } = &mut *state;
        let mut asked_any = false;
        for key in registry.find_all(name, holder) {
            if let Some(entry) = registry.get(&key) {
                asked_any |= revocations.requested(entry);
            }
        }
        if asked_any {
            shared.work_arrived.notify_one();
        }
    }
}

impl Shared {
    /// The state of a watchdog with no locks yet, renewing leases of `timeout` through
    /// `router`.
    fn new(
        router: Arc<Router>,
        timeout: Duration,
        acks: Option<AckSetting>,
        callbacks: Callbacks,
    ) -> Result<Self> {
        let interval = timeout / 3;
        Ok(Shared {
            state: Mutex::new(State {
                registry: Registry::default(),
                schedule: Schedule::new(Instant::now(), interval),
                losses: LossReports::default(),
                risks: RiskReports::default(),
                revocations: RevocationReports::default(),
                renewals: RenewalCounts::default(),
                stopping: false,
            }),
            receipts: Mutex::new(ReceiptQueue::new(interval)),
            work_arrived: Condvar::new(),
            renewal_done: Condvar::new(),
            router,
            timeout,
            timeout_ms: crate::protocol::names::lease_millis("watchdog timeout", timeout)?,
            interval,
            callbacks,
            acks,
            unreplicated_log: ShortfallLog::new(),
            renewal_times: Histogram::default(),
        })
    }

    fn run(&self) {
        let mut due_now = DueNow::default();
        loop {
            match self.next_work(&mut due_now) {
                None => return self.delete_queued_receipts(),
                Some(Work::Tell(risks, revocations, losses)) => {
                    self.tell(risks, revocations, losses);
                }
                Some(Work::Renew {
                    batch,
                    receipts,
                    sent_at,
                    answer_by,
                    acks_by,
                }) => {
                    let acks = self.acks.as_ref().map(|setting| AckWait {
                        setting,
                        by: acks_by,
                    });
                    let due = Due {
                        taken_at: sent_at,
                        answer_by,
                        acks,
                    };
                    let mut renewed = 0;
                    let renewing = !batch.is_empty();
                    let unreplicated = renewal::renew_everywhere(
                        &self.router,
                        self.timeout_ms,
                        batch,
                        receipts,
                        due,
                        |batch, outcomes| renewed += self.apply(batch, outcomes, sent_at),
                    );
                    if renewing {
                        let took = sent_at.elapsed();
                        self.renewal_times.record(took);
                        crate::client::telemetry::renewal_answered(took);
                    }
                    if let Some(why) = unreplicated {
                        self.renewals_unreplicated(renewed, &why);
                    }
                }
            }
        }
    }

    /// Deletes the receipts still queued, once, as the thread stops: what releases just
    /// before a shutdown left does not wait for its TTL.
    fn delete_queued_receipts(&self) {
        let receipts = self.receipts.lock().take();
        if receipts.is_empty() {
            return;
        }
        let now = Instant::now();
        let due = Due {
            taken_at: now,
            answer_by: now + self.router.response_timeout(),
            acks: None,
        };
        let (router, lease_ms) = (&self.router, self.timeout_ms);
        renewal::renew_everywhere(router, lease_ms, Vec::new(), receipts, due, |_, _| {});
    }

    /// Tells risk changes, revocation requests, then losses, to the log and the callbacks.
    fn tell(
        &self,
        risks: Vec<RiskNotice>,
        revocations: Vec<RevocationNotice>,
        losses: Vec<LostLock>,
    ) {
        risk::tell(risks, self.callbacks.on_risk.as_ref());
        revocation::tell(revocations, self.callbacks.on_revocation.as_ref());
        loss::tell(losses, self.callbacks.on_lost.as_ref());
    }

    /// Sleeps until there is work; `None` when the watchdog stops.
    fn next_work(&self, due_now: &mut DueNow) -> Option<Work> {
        let mut state = self.state.lock();
        loop {
            if state.stopping {
                return None;
            }
            if let Some(work) = self.work_due(&mut state, Instant::now(), due_now) {
                return Some(work);
            }
            let next_due = earliest(state.schedule.next_due(), self.receipts.lock().flush_by());
            state.schedule.thread_sleeps(next_due);
            match next_due {
                Some(at) => {
                    self.work_arrived.wait_until(&mut state, at);
                }
                None => self.work_arrived.wait(&mut state),
            }
            state.schedule.thread_works();
        }
    }

    /// The work due `now`, if any. Losses are told before a batch is taken, so a slow
    /// callback never holds up a batch that releases wait for.
    fn work_due(&self, state: &mut State, now: Instant, due_now: &mut DueNow) -> Option<Work> {
        if !state.has_reports() {
            let State {
                registry, schedule, ..
            } = &mut *state;
            schedule.take_due(now, registry, due_now);
            for slot in due_now.lease_ends.drain(..) {
                state.check_lease_end(slot, now);
            }
            let batch = state.take_batch(due_now.renewals.drain(..), now);
            let receipts = self.receipts_to_delete(!batch.is_empty(), now);
            if !batch.is_empty() || !receipts.is_empty() {
                return Some(self.renewal_work(state, batch, receipts, now));
            }
        }
        if !state.has_reports() {
            return None;
        }
        let State {
            risks,
            revocations,
            losses,
            ..
        } = state;
        Some(Work::Tell(risks.take(), revocations.take(), losses.take()))
    }

    /// The release receipts to delete now: with a batch of renewals (`renewing`) every
    /// receipt queued, else only once the queue is due.
    fn receipts_to_delete(&self, renewing: bool, now: Instant) -> Vec<String> {
        let mut queue = self.receipts.lock();
        if renewing || queue.is_due(now) {
            queue.take()
        } else {
            Vec::new()
        }
    }

    /// The work of renewing `batch` and deleting `receipts`, sent `now`: its answers are never
    /// waited for past a deadline the thread must meet, the earliest lease deadline of the
    /// batch or any lease-end check due sooner. `WAIT`'s answer, which only reports, is given
    /// up on there too.
    fn renewal_work(
        &self,
        state: &mut State,
        batch: Vec<Renewal>,
        receipts: Vec<String>,
        now: Instant,
    ) -> Work {
        let answer_by = now + self.router.response_timeout();
        let acks_by = answer_by
            + self
                .acks
                .as_ref()
                .map_or(Duration::ZERO, AckSetting::timeout);
        let State {
            registry, schedule, ..
        } = state;
        let must_end_by = batch
            .iter()
            .map(|renewal| renewal.lease_deadline)
            .chain(schedule.next_lease_end(registry))
            .min();
        let (answer_by, acks_by) = match must_end_by {
            Some(end) => (answer_by.min(end), acks_by.min(end)),
            None => (answer_by, acks_by),
        };
        Work::Renew {
            batch,
            receipts,
            sent_at: now,
            answer_by,
            acks_by,
        }
    }

    /// Records the outcomes and schedules what comes next. Answers how many holds were
    /// renewed.
    fn apply(&self, batch: &[Renewal], outcomes: Vec<Outcome>, sent_at: Instant) -> u64 {
        let retry_delay =
            (self.interval / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let renewed = outcomes
            .iter()
            .filter(|outcome| matches!(outcome, Outcome::Renewed))
            .count() as u64;
        let mut state = self.state.lock();
        let now = Instant::now();
        if !batch.is_empty() {
            state.count_batch(batch.len() as u64, &outcomes);
        }
        let times = Times {
            sent_at,
            now,
            retry_delay,
        };
        for (renewal, outcome) in batch.iter().zip(outcomes) {
            self.apply_outcome(&mut state, renewal, outcome, times);
        }
        drop(state);
        self.renewal_done.notify_all();
        renewed
    }

    /// Records the `outcome` of one `renewal` of a batch: renewed (its lease runs on from
    /// the send), failed (tried again soon, before its deadline), or lost. A renewal of an
    /// entry gone or replaced meanwhile is dropped; an entry marked lost while its renewal
    /// was out (a force-release notice) is removed, its loss told already.
    fn apply_outcome(&self, state: &mut State, renewal: &Renewal, outcome: Outcome, times: Times) {
        let Times {
            sent_at,
            now,
            retry_delay,
        } = times;
        let State {
            registry,
            schedule,
            risks,
            ..
        } = &mut *state;
        let slot = renewal.slot;
        let Some(entry) = registry.at_mut(slot) else {
            return;
        };
        if entry.chain != renewal.chain {
            return;
        }
        entry.renewing = false;
        if entry.lease.is_marked_lost() {
            // Told while the renewal was out (a force-release notice).
            let key = Arc::clone(&entry.key);
            if let Some(held) = registry.remove(&key) {
                crate::client::telemetry::held(held);
            }
            return;
        }
        let deadline = entry.lease.deadline();
        let reason = match outcome {
            // Redis found the holder and renewed its lease: the lease never ran out there,
            // however late this process reads the answer (it was slow to read, starved of
            // CPU, not the lease). It runs on from the send, unless this process was slower
            // than a whole lease, or its holder was told meanwhile that the local deadline had
            // passed (a lost hold stays lost).
            Outcome::Renewed
                if lease::deadline(sent_at, self.timeout) > now
                    && entry.lease.renew(sent_at, self.timeout) =>
            {
                risks.renewed(entry);
                schedule.renewal(slot, entry, sent_at + self.interval);
                return;
            }
            // No renewal by the deadline: the lease may have run out.
            _ if now >= deadline => LostReason::LeaseExpired,
            Outcome::Renewed => LostReason::LeaseExpired,
            Outcome::Failed(reason) => {
                risks.renewal_failed(entry, reason);
                schedule.renewal(slot, entry, (now + retry_delay).min(deadline));
                schedule.lease_end(slot, entry);
                return;
            }
            Outcome::HolderGone => LostReason::NotHeldAnymore,
        };
        let key = Arc::clone(&entry.key);
        state.lose(&key, reason);
    }

    /// `renewed` holds were renewed, but too few replicas acknowledged it (`why`): they are
    /// kept, counted and reported.
    fn renewals_unreplicated(&self, renewed: u64, why: &Unreplicated) {
        if renewed == 0 {
            return;
        }
        self.state.lock().renewals.unreplicated += renewed;
        let log = &self.unreplicated_log;
        log.report(renewed, format_args!("renewal of {renewed} holds"), why);
    }
}

/// A level granted to a chain: when its request was sent, the lease it asked for (a `fixed`
/// one, or the watchdog's), and the renewal interval.
#[derive(Clone, Copy)]
struct Level {
    sent_at: Instant,
    lease: Duration,
    fixed: bool,
    interval: Duration,
}

impl State {
    /// Adds `level` to the live chain at `slot`: its lease extends from the level's send and
    /// its risk clears (Redis just granted a level of it); a first renewed level schedules the
    /// chain's renewal, a fixed one watches its lease's end while nothing renews the chain.
    /// Answers the chain's lease state and fencing token, and whether the watchdog's thread
    /// must wake.
    fn add_level(&mut self, slot: Slot, level: Level) -> (Option<(Arc<LeaseState>, u64)>, bool) {
        let Some(entry) = self.registry.at_mut(slot) else {
            return (None, false);
        };
        entry.lease.extend(level.sent_at, level.lease);
        self.risks.renewed(entry);
        let wake = if level.fixed {
            entry.fixed_levels += 1;
            entry.renewed_levels == 0 && self.schedule.lease_end(slot, entry)
        } else {
            entry.renewed_levels += 1;
            let first = entry.renewed_levels == 1 && !entry.renewing;
            let at = level.sent_at + level.interval;
            first && self.schedule.renewal(slot, entry, at)
        };
        let token = entry.lease.token();
        (Some((Arc::clone(&entry.lease), token)), wake)
    }

    /// Starts tracking a new chain of `holding` with its first `level`, granted as `grant`
    /// says: renewed from the level's send on, or watched until its fixed lease ends.
    /// Answers its lease state and token, and whether the watchdog's thread must wake.
    fn start_chain(
        &mut self,
        holding: &Holding<'_>,
        grant: Grant<'_>,
        level: Level,
    ) -> ((Arc<LeaseState>, u64), bool) {
        let token = grant.token;
        let lease = LeaseState::new(level.sent_at, level.lease, token).of_upgrade(grant.upgrade);
        let lease = Arc::new(lease);
        let key = Arc::from(holding.key);
        let (slot, entry) =
            self.registry
                .start_chain(key, holding, Arc::clone(&lease), level.fixed);
        let wake = match level.fixed {
            false => self
                .schedule
                .renewal(slot, entry, level.sent_at + level.interval),
            true => self.schedule.lease_end(slot, entry),
        };
        self.schedule.compact(&self.registry);
        ((lease, token), wake)
    }

    /// Counts a batch of `sent` renewals and their `outcomes` (failures among them).
    fn count_batch(&mut self, sent: u64, outcomes: &[Outcome]) {
        let failed = outcomes
            .iter()
            .filter(|outcome| matches!(outcome, Outcome::Failed(_)))
            .count() as u64;
        self.renewals.batches += 1;
        self.renewals.sent += sent;
        self.renewals.failed += failed;
        crate::client::telemetry::renewed(sent, failed);
    }

    /// Whether risks, revocation requests or losses wait to be told.
    fn has_reports(&self) -> bool {
        !self.losses.is_empty() || !self.risks.is_empty() || !self.revocations.is_empty()
    }

    fn lose(&mut self, name: &str, reason: LostReason) {
        self.losses.lose(&mut self.registry, name, reason);
    }

    /// Gives the chain in `slot` up if its lease has run out by `now`.
    fn check_lease_end(&mut self, slot: Slot, now: Instant) {
        let Some(entry) = self.registry.at(slot) else {
            return;
        };
        if entry.lease.deadline() <= now {
            let key = Arc::clone(&entry.key);
            self.lose(&key, LostReason::LeaseExpired);
        }
    }

    /// Turns the entries whose renewal is due into a renewal batch, marking them as renewing.
    /// Entries past their deadline are given up rather than renewed (this process was paused,
    /// or the thread was late).
    fn take_batch(&mut self, due: impl Iterator<Item = Slot>, now: Instant) -> Vec<Renewal> {
        let mut batch = Vec::new();
        for slot in due {
            let Some(entry) = self.registry.at_mut(slot) else {
                continue;
            };
            if entry.renewing {
                continue;
            }
            if entry.renewed_levels == 0 {
                // Only fixed-lease levels are left: nothing to renew, a deadline to watch.
                self.schedule.lease_end(slot, entry);
                continue;
            }
            let lease_deadline = entry.lease.deadline();
            if lease_deadline <= now {
                let key = Arc::clone(&entry.key);
                self.lose(&key, LostReason::LeaseExpired);
                continue;
            }
            entry.renewing = true;
            batch.push(Renewal {
                name: Arc::clone(&entry.name),
                kind: entry.kind,
                holder: Arc::clone(&entry.holder),
                chain: entry.chain,
                lease_deadline,
                slot,
            });
        }
        batch
    }
}
