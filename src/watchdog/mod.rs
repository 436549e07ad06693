//! The watchdog: one thread per manager that keeps the leases of held locks alive.
//!
//! Entries are keyed by lock name (the counterpart of Redisson's `EXPIRATION_RENEWAL_MAP`):
//! the holder in this process, how many of its reentrant levels asked for the watchdog, the
//! shared [`LeaseState`], and the local deadline of the lease. A [`TimerWheel`] says which
//! entries fall due; all entries due in one tick are renewed with one pipeline of batched
//! script calls (one round trip however many locks).
//!
//! Two rules keep renewals honest:
//! - an entry is removed *before* its last release is sent, and a release waits for a renewal
//!   of its entry that is already in flight, so no renewal reaches Redis after a release;
//! - a renewal that fails is retried until the lease would have run out by the local
//!   monotonic clock, and only then, or when Redis says the holder is gone, is the lock given
//!   up and its [`LeaseState`] marked lost.
//!
//! This module talks to Redis only through the [`Pool`] and only from its own thread.

mod wheel;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::{Script, Value};

use crate::error::{Error, LostReason, Result};
use crate::lease::{LeaseState, LostLock};
use crate::pool::Pool;
use crate::script::{evalsha_pipelined, ScriptCall};
use wheel::TimerWheel;

static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("renew.lua")));

/// How many locks one script call renews. Bounds the time one call blocks Redis (other
/// clients run between the calls of a pipeline) while keeping script calls few.
const LOCKS_PER_SCRIPT_CALL: usize = 1_000;

/// Ticks per renewal interval: renewals due within one tick go out together, at most a
/// sixteenth of the interval late (the lease has two intervals of margin).
const TICKS_PER_INTERVAL: u32 = 16;
/// Slots of the timer wheel: one turn spans four intervals.
const WHEEL_SLOTS: usize = 64;

/// Called with every lock the watchdog gives up.
pub(crate) type LostCallback = Arc<dyn Fn(&LostLock) + Send + Sync>;

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the watchdog thread: work arrived in an empty wheel, or it must stop.
    work_arrived: Condvar,
    /// Wakes releases waiting for an in-flight renewal of their entry.
    renewal_done: Condvar,
    pool: Arc<Pool>,
    timeout: Duration,
    interval: Duration,
    on_lost: Option<LostCallback>,
}

struct State {
    entries: HashMap<Arc<str>, Entry>,
    wheel: TimerWheel<(Arc<str>, u64)>,
    next_generation: u64,
    stopping: bool,
}

struct Entry {
    holder: Arc<str>,
    /// Reentrant levels of the holder that asked for the watchdog.
    levels: u32,
    /// Tells this entry from an earlier one of the same name in the wheel.
    generation: u64,
    lease: Arc<LeaseState>,
    /// When the lease runs out by the local clock unless a renewal succeeds: the send time of
    /// the last successful acquisition or renewal plus the timeout.
    lease_deadline: Instant,
    /// A renewal of this entry is on the wire.
    renewing: bool,
}

/// One lock of a renewal batch.
struct Renewal {
    name: Arc<str>,
    holder: Arc<str>,
    generation: u64,
    lease_deadline: Instant,
}

enum Outcome {
    Renewed,
    HolderGone,
    Failed,
}

impl Watchdog {
    pub(crate) fn start(
        pool: Arc<Pool>,
        timeout: Duration,
        on_lost: Option<LostCallback>,
    ) -> Result<Self> {
        let interval = timeout / 3;
        let tick = (interval / TICKS_PER_INTERVAL).max(Duration::from_millis(1));
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                entries: HashMap::new(),
                wheel: TimerWheel::new(Instant::now(), tick, WHEEL_SLOTS),
                next_generation: 0,
                stopping: false,
            }),
            work_arrived: Condvar::new(),
            renewal_done: Condvar::new(),
            pool,
            timeout,
            interval,
            on_lost,
        });
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

    /// Starts (or, for a reentrant level, extends) the renewal of `name` held by `holder`,
    /// whose acquisition was sent at `sent_at`. Answers the lease state of the chain.
    pub(crate) fn watch(&self, name: &str, holder: &str, sent_at: Instant) -> Arc<LeaseState> {
        let shared = &*self.shared;
        let lease_deadline = sent_at + shared.timeout;
        let mut state = shared.state.lock();
        if let Some(entry) = state.entries.get_mut(name) {
            if &*entry.holder == holder {
                entry.levels += 1;
                entry.lease_deadline = entry.lease_deadline.max(lease_deadline);
                return Arc::clone(&entry.lease);
            }
            // Another thread of this process held it, and lost it before its renewal noticed.
            entry.lease.mark_lost(LostReason::NotHeldAnymore);
        }
        let generation = state.next_generation;
        state.next_generation += 1;
        let lease = Arc::new(LeaseState::renewed());
        let name: Arc<str> = Arc::from(name);
        let was_idle = state.wheel.len() == 0;
        state
            .wheel
            .insert(sent_at + shared.interval, (Arc::clone(&name), generation));
        state.entries.insert(
            name,
            Entry {
                holder: Arc::from(holder),
                levels: 1,
                generation,
                lease: Arc::clone(&lease),
                lease_deadline,
                renewing: false,
            },
        );
        if was_idle {
            shared.work_arrived.notify_one();
        }
        lease
    }

    /// The lease state of the chain `holder` has on `name`, if the watchdog renews it.
    pub(crate) fn chain_of(&self, name: &str, holder: &str) -> Option<Arc<LeaseState>> {
        let state = self.shared.state.lock();
        let entry = state.entries.get(name)?;
        (&*entry.holder == holder).then(|| Arc::clone(&entry.lease))
    }

    /// Ends one watched level of `holder` on `name`; the last one removes the entry, after any
    /// renewal of it that is in flight has come back. Answers whether the watchdog still
    /// renews the lock afterwards.
    pub(crate) fn unwatch(&self, name: &str, holder: &str) -> bool {
        let shared = &*self.shared;
        let mut state = shared.state.lock();
        let Some(entry) = state.entries.get_mut(name) else {
            return false;
        };
        if &*entry.holder != holder {
            return false;
        }
        entry.levels = entry.levels.saturating_sub(1);
        if entry.levels > 0 {
            return true;
        }
        // A renewal is bounded by its socket timeouts: at most a connection and three round
        // trips (pipeline, SCRIPT LOAD, pipeline again), twice when a stale connection is
        // replaced. Waiting that long keeps the rule; the bound only guards against a bug.
        let give_up_at =
            Instant::now() + shared.pool.response_timeout() * 8 + Duration::from_secs(1);
        while state.entries.get(name).is_some_and(|entry| entry.renewing) {
            if shared
                .renewal_done
                .wait_until(&mut state, give_up_at)
                .timed_out()
            {
                log::warn!("lock {name:?}: released while its renewal is still unanswered");
                break;
            }
        }
        if state
            .entries
            .get(name)
            .is_some_and(|entry| &*entry.holder == holder)
        {
            state.entries.remove(name);
        }
        false
    }

    /// How many locks the watchdog renews now.
    pub(crate) fn len(&self) -> usize {
        self.shared.state.lock().entries.len()
    }

    /// Stops and joins the thread. Held locks are no longer renewed and run out by their lease.
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

impl Shared {
    fn run(&self) {
        let mut due = Vec::new();
        loop {
            let batch = {
                let mut state = self.state.lock();
                loop {
                    if state.stopping {
                        return;
                    }
                    state.wheel.collect(Instant::now(), &mut due);
                    if !due.is_empty() {
                        break;
                    }
                    match state.wheel.next_due() {
                        Some(at) => {
                            self.work_arrived.wait_until(&mut state, at);
                        }
                        None => self.work_arrived.wait(&mut state),
                    }
                }
                take_batch(&mut state, &mut due)
            };
            if batch.is_empty() {
                continue;
            }
            let sent_at = Instant::now();
            let outcomes = self.renew(&batch, sent_at);
            let lost = self.apply(&batch, outcomes, sent_at);
            for lost_lock in lost {
                log::warn!(
                    "lock {:?} held by {} was lost: {}",
                    lost_lock.name,
                    lost_lock.holder,
                    lost_lock.reason
                );
                if let Some(on_lost) = &self.on_lost {
                    // A panicking callback must not take the renewal of every other lock down.
                    let call = std::panic::AssertUnwindSafe(|| on_lost(&lost_lock));
                    if std::panic::catch_unwind(call).is_err() {
                        log::error!("the lost-lock callback panicked for {:?}", lost_lock.name);
                    }
                }
            }
        }
    }

    /// Sends the renewals of `batch` in one pipeline; one outcome per renewal.
    fn renew(&self, batch: &[Renewal], sent_at: Instant) -> Vec<Outcome> {
        // Never wait past the earliest lease deadline: a silent Redis must not hide a loss.
        let earliest_deadline = batch.iter().map(|renewal| renewal.lease_deadline).min();
        let until_deadline =
            earliest_deadline.map_or(Duration::ZERO, |at| at.saturating_duration_since(sent_at));
        let timeout = self.pool.response_timeout().min(until_deadline);
        let lease_ms = self.timeout.as_millis().to_string();
        let calls: Vec<ScriptCall<'_>> = batch
            .chunks(LOCKS_PER_SCRIPT_CALL)
            .map(|chunk| ScriptCall {
                keys: chunk.iter().map(|renewal| &*renewal.name).collect(),
                args: std::iter::once(lease_ms.as_str())
                    .chain(chunk.iter().map(|renewal| &*renewal.holder))
                    .collect(),
            })
            .collect();
        let answers = self
            .pool
            .run_with_timeout(timeout, |connection| {
                evalsha_pipelined(connection, &RENEW, &calls)
            })
            .inspect_err(|err| log::debug!("renewal of {} locks failed: {err}", batch.len()))
            .unwrap_or_default();
        let mut outcomes = Vec::with_capacity(batch.len());
        for (chunk, answer) in batch.chunks(LOCKS_PER_SCRIPT_CALL).zip(answers) {
            match answer {
                Value::Array(flags) if flags.len() == chunk.len() => {
                    outcomes.extend(flags.iter().map(|flag| match flag {
                        Value::Int(1) => Outcome::Renewed,
                        _ => Outcome::HolderGone,
                    }))
                }
                other => {
                    log::debug!("renewal of {} locks refused: {other:?}", chunk.len());
                    outcomes.extend(chunk.iter().map(|_| Outcome::Failed));
                }
            }
        }
        outcomes.resize_with(batch.len(), || Outcome::Failed);
        outcomes
    }

    /// Records the outcomes and schedules what comes next; answers the locks given up.
    fn apply(&self, batch: &[Renewal], outcomes: Vec<Outcome>, sent_at: Instant) -> Vec<LostLock> {
        let retry_delay =
            (self.interval / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut lost = Vec::new();
        let mut state = self.state.lock();
        let now = Instant::now();
        for (renewal, outcome) in batch.iter().zip(outcomes) {
            let Some(entry) = state.entries.get_mut(&renewal.name) else {
                continue;
            };
            if entry.generation != renewal.generation {
                continue;
            }
            entry.renewing = false;
            let reason = match outcome {
                Outcome::Renewed => {
                    entry.lease_deadline = sent_at + self.timeout;
                    let next = (Arc::clone(&renewal.name), renewal.generation);
                    state.wheel.insert(sent_at + self.interval, next);
                    continue;
                }
                Outcome::Failed if now < entry.lease_deadline => {
                    let retry_at = (now + retry_delay).min(entry.lease_deadline);
                    let next = (Arc::clone(&renewal.name), renewal.generation);
                    state.wheel.insert(retry_at, next);
                    continue;
                }
                Outcome::Failed => LostReason::LeaseExpired,
                Outcome::HolderGone => LostReason::NotHeldAnymore,
            };
            if let Some(entry) = state.entries.remove(&renewal.name) {
                entry.lease.mark_lost(reason);
                lost.push(LostLock {
                    name: renewal.name.to_string(),
                    holder: entry.holder.to_string(),
                    reason,
                });
            }
        }
        drop(state);
        self.renewal_done.notify_all();
        lost
    }
}

/// Marks the entries behind `due` as renewing and describes them; stale wheel items (of
/// released or replaced entries) are dropped here.
fn take_batch(state: &mut State, due: &mut Vec<(Arc<str>, u64)>) -> Vec<Renewal> {
    due.drain(..)
        .filter_map(|(name, generation)| {
            let entry = state.entries.get_mut(&name)?;
            if entry.generation != generation || entry.renewing {
                return None;
            }
            entry.renewing = true;
            Some(Renewal {
                holder: Arc::clone(&entry.holder),
                lease_deadline: entry.lease_deadline,
                name,
                generation,
            })
        })
        .collect()
}
