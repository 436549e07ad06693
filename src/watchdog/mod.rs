//! The watchdog: one thread per manager that keeps the leases of held locks alive and finds
//! out, as early as it can, when one is lost.
//!
//! Entries are keyed by lock name (the counterpart of Redisson's `EXPIRATION_RENEWAL_MAP`):
//! the holder in this process, its fencing token, how many of its reentrant levels asked for
//! the watchdog and how many took a fixed lease, and the shared [`LeaseState`] that carries
//! the local deadline of the lease. A [`TimerWheel`] says which renewals fall due; all
//! renewals due in one tick go out as one pipeline of batched script calls (one round trip
//! however many locks). A heap of deadlines, checked to the instant, covers the leases that
//! may run out: those whose renewals fail, and those with only fixed-lease levels.
//!
//! A lock is given up, its [`LeaseState`] marked lost and the lost-lock callback told, when:
//! - a renewal answers that the holder is gone ([`LostReason::NotHeldAnymore`]);
//! - the lease deadline passes by the local monotonic clock before a renewal succeeded,
//!   whether Redis is unreachable or this process was paused ([`LostReason::LeaseExpired`]);
//! - the pub/sub listener hears a force-release notice for it
//!   ([`LostReason::ForceReleased`], see [`Watchdog::force_released`]).
//!
//! A failed renewal is retried until the deadline, so an outage shorter than the lease is not
//! a loss. An entry is removed *before* its last release is sent, and a release waits for a
//! renewal of its entry that is already in flight, so no renewal is sent after a release.
//! (One that timed out may still sit unread in a stalled server's input; run later, it finds
//! the holder gone and does nothing.)
//!
//! This module talks to Redis only through the [`Pool`] and only from its own thread; the
//! callback runs on that thread too.

mod wheel;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
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

/// What an acquisition got from Redis.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    /// The fencing token the server answered.
    pub(crate) token: u64,
}

/// Called with every lock found lost.
pub(crate) type LostCallback = Arc<dyn Fn(&LostLock) + Send + Sync>;

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// A cheap handle for the pub/sub listener to report force-release notices with.
#[derive(Clone)]
pub(crate) struct NoticeSink(Arc<Shared>);

struct Shared {
    state: Mutex<State>,
    /// Wakes the watchdog thread: work arrived, a loss is to be told, or it must stop.
    work_arrived: Condvar,
    /// Wakes releases waiting for an in-flight renewal of their entry.
    renewal_done: Condvar,
    pool: Arc<Pool>,
    timeout: Duration,
    /// The timeout in whole milliseconds, rounded up as for acquisitions.
    timeout_ms: u64,
    interval: Duration,
    on_lost: Option<LostCallback>,
}

struct State {
    entries: HashMap<Arc<str>, Entry>,
    schedule: Schedule,
    /// Losses recorded and not yet told to the callback.
    reports: Vec<LostLock>,
    stopping: bool,
}

/// When the watchdog thread has something to do.
struct Schedule {
    /// Renewals, batched by tick: `(name, ticket)`; only the entry's current ticket counts.
    wheel: TimerWheel<(Arc<str>, u64)>,
    /// Deadline checks, to the instant: `(deadline, chain, name)`.
    deadlines: BinaryHeap<Reverse<(Instant, u64, Arc<str>)>>,
    /// The last ticket or chain number handed out.
    last_number: u64,
    /// What the watchdog thread is doing, so that new work wakes it only when it must.
    thread: ThreadState,
}

#[derive(Clone, Copy)]
enum ThreadState {
    /// It looks at the schedule before it sleeps again: no need to wake it.
    Working,
    /// It sleeps until the given instant (or until woken); earlier work must wake it.
    Sleeping { until: Option<Instant> },
}

struct Entry {
    /// Tells this acquisition chain from earlier and later ones of the same name.
    chain: u64,
    holder: Arc<str>,
    /// The thread (number) that holds it.
    thread: u64,
    /// Carries the chain's fencing token and its deadline.
    lease: Arc<LeaseState>,
    /// Reentrant levels of the holder that asked for the watchdog...
    renewed_levels: u32,
    /// ... and that took a fixed lease.
    fixed_levels: u32,
    /// The wheel item that is current for this entry; older ones are ignored.
    ticket: u64,
    /// A renewal of this entry is on the wire.
    renewing: bool,
    /// The deadline a check is queued for in the heap, if one is.
    deadline_check: Option<Instant>,
}

/// What the watchdog thread does next.
enum Work {
    /// Tell these losses to the log and the callback.
    Tell(Vec<LostLock>),
    /// Renew these locks, first sent at `sent_at`, with answers read no later than
    /// `answer_by`.
    Renew {
        batch: Vec<Renewal>,
        sent_at: Instant,
        answer_by: Instant,
    },
}

/// One lock of a renewal batch.
struct Renewal {
    name: Arc<str>,
    holder: Arc<str>,
    chain: u64,
    lease_deadline: Instant,
}

enum Outcome {
    Renewed,
    HolderGone,
    Failed,
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
        pool: Arc<Pool>,
        timeout: Duration,
        on_lost: Option<LostCallback>,
    ) -> Result<Self> {
        let interval = timeout / 3;
        let tick = (interval / TICKS_PER_INTERVAL).max(Duration::from_millis(1));
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                entries: HashMap::new(),
                schedule: Schedule {
                    wheel: TimerWheel::new(Instant::now(), tick, WHEEL_SLOTS),
                    deadlines: BinaryHeap::new(),
                    last_number: 0,
                    thread: ThreadState::Working,
                },
                reports: Vec::new(),
                stopping: false,
            }),
            work_arrived: Condvar::new(),
            renewal_done: Condvar::new(),
            pool,
            timeout,
            timeout_ms: crate::protocol::names::lease_millis("watchdog timeout", timeout)?,
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

    /// A handle for reporting force-release notices.
    pub(crate) fn notice_sink(&self) -> NoticeSink {
        NoticeSink(Arc::clone(&self.shared))
    }

    /// Tracks one more level of `name` held by `holder` (a chain's holder id) on `thread`, as
    /// `grant`ed by a request sent at `sent_at`: renewed by the watchdog, or with a `fixed`
    /// lease that is only watched until it runs out. A level of the chain already tracked
    /// joins it; a fresh acquisition starts a new chain (and an older chain of the name, which
    /// must have been lost, is reported lost). Answers the lease state of the chain and its
    /// fencing token.
    pub(crate) fn watch(
        &self,
        name: &str,
        holder: &str,
        thread: u64,
        grant: Grant,
        sent_at: Instant,
        fixed: Option<Duration>,
    ) -> (Arc<LeaseState>, u64) {
        let token = grant.token;
        let shared = &*self.shared;
        let lease = fixed.unwrap_or(shared.timeout);
        let mut state = shared.state.lock();
        let state = &mut *state;
        let mut wake = false;
        if let Some(entry) = state.entries.get_mut(name) {
            if &*entry.holder == holder && entry.lease.lost().is_none() {
                entry.lease.extend(sent_at, lease);
                match fixed {
                    None => {
                        entry.renewed_levels += 1;
                        if entry.renewed_levels == 1 && !entry.renewing {
                            let at = sent_at + shared.interval;
                            wake = state.schedule.renewal(&Arc::from(name), entry, at);
                        }
                    }
                    Some(_) => {
                        entry.fixed_levels += 1;
                        if entry.renewed_levels == 0 {
                            wake = state.schedule.deadline_check(&Arc::from(name), entry);
                        }
                    }
                }
                let lease = Arc::clone(&entry.lease);
                let token = entry.lease.token();
                if wake {
                    shared.work_arrived.notify_one();
                }
                return (lease, token);
            }
            // A chain this process no longer holds: another chain took the lock after it was
            // lost (before the loss was noticed).
            let reason = entry.lease.lost().unwrap_or(LostReason::NotHeldAnymore);
            state.lose(name, reason);
            wake = true; // to tell the callback
        }
        let name: Arc<str> = Arc::from(name);
        let chain = state.schedule.next_number();
        let mut entry = Entry {
            chain,
            holder: Arc::from(holder),
            thread,
            lease: Arc::new(LeaseState::new(sent_at, lease, token)),
            renewed_levels: u32::from(fixed.is_none()),
            fixed_levels: u32::from(fixed.is_some()),
            ticket: 0,
            renewing: false,
            deadline_check: None,
        };
        wake |= match fixed {
            None => state
                .schedule
                .renewal(&name, &mut entry, sent_at + shared.interval),
            Some(_) => state.schedule.deadline_check(&name, &mut entry),
        };
        let lease = Arc::clone(&entry.lease);
        // Replaces a stale entry whose renewal may be in flight: that renewal is then told
        // apart by its chain number.
        state.entries.insert(name, entry);
        state.compact_deadline_checks();
        if wake {
            shared.work_arrived.notify_one();
        }
        (lease, token)
    }

    /// The chain by which `thread` holds `name`, unless it is known to be lost: its holder id
    /// and how many levels it has.
    pub(crate) fn chain_of(&self, name: &str, thread: u64) -> Option<(Arc<str>, u32)> {
        let state = self.shared.state.lock();
        let entry = state.entries.get(name)?;
        (entry.thread == thread && entry.lease.lost().is_none()).then(|| {
            (
                Arc::clone(&entry.holder),
                entry.renewed_levels + entry.fixed_levels,
            )
        })
    }

    /// Records that the chain `holder` of `name` is gone, as an acquisition found: it is
    /// reported lost ([`LostReason::NotHeldAnymore`]).
    pub(crate) fn chain_gone(&self, name: &str, holder: &str) {
        let mut state = self.shared.state.lock();
        if state
            .entries
            .get(name)
            .is_some_and(|entry| &*entry.holder == holder)
        {
            state.lose(name, LostReason::NotHeldAnymore);
            self.shared.work_arrived.notify_one();
        }
    }

    /// Ends one level of the chain `lease` of `name` (a `fixed`-lease level or a renewed one).
    /// The last level removes the entry, after any renewal of it in flight has come back.
    /// Answers the levels the chain has left (none when it is not tracked any more).
    pub(crate) fn unwatch(&self, name: &str, lease: &Arc<LeaseState>, fixed: bool) -> LevelsLeft {
        self.end_level(name, |entry| Arc::ptr_eq(&entry.lease, lease), Some(fixed))
            .map_or_else(LevelsLeft::default, |(left, _)| left)
    }

    /// Like [`unwatch`](Watchdog::unwatch), for a level of `thread`'s chain whose guard is
    /// gone: a renewed level if there is one, else a fixed one. Also answers the chain's
    /// holder id; `None` when `thread` has no chain of `name` here.
    pub(crate) fn unwatch_thread(&self, name: &str, thread: u64) -> Option<(LevelsLeft, Arc<str>)> {
        self.end_level(name, |entry| entry.thread == thread, None)
    }

    fn end_level(
        &self,
        name: &str,
        is_ours: impl Fn(&Entry) -> bool,
        fixed: Option<bool>,
    ) -> Option<(LevelsLeft, Arc<str>)> {
        let shared = &*self.shared;
        let mut state = shared.state.lock();
        let State {
            entries, schedule, ..
        } = &mut *state;
        let entry = entries.get_mut(name).filter(|entry| is_ours(entry))?;
        let fixed = fixed.unwrap_or(entry.renewed_levels == 0);
        if fixed {
            entry.fixed_levels = entry.fixed_levels.saturating_sub(1);
        } else {
            entry.renewed_levels = entry.renewed_levels.saturating_sub(1);
        }
        let left = LevelsLeft {
            renewed: entry.renewed_levels,
            fixed: entry.fixed_levels,
        };
        let holder = Arc::clone(&entry.holder);
        if left.renewed > 0 {
            return Some((left, holder));
        }
        if left.fixed > 0 {
            // Fixed-lease levels remain and nothing renews them: watch their deadline. (The
            // release of this level gives them at least the watchdog timeout; the deadline
            // kept here is older, so it errs on the safe side.)
            if schedule.deadline_check(&Arc::from(name), entry) {
                shared.work_arrived.notify_one();
            }
            return Some((left, holder));
        }
        // A renewal reads its answers for at most the response timeout; the bound only guards
        // against a bug.
        let give_up_at =
            Instant::now() + shared.pool.response_timeout() * 2 + Duration::from_secs(1);
        let renewing = |state: &State| {
            state
                .entries
                .get(name)
                .is_some_and(|entry| is_ours(entry) && entry.renewing)
        };
        while renewing(&state) {
            if shared
                .renewal_done
                .wait_until(&mut state, give_up_at)
                .timed_out()
            {
                log::warn!("lock {name:?}: released while its renewal is still unanswered");
                break;
            }
        }
        if state.entries.get(name).is_some_and(&is_ours) {
            state.entries.remove(name);
        }
        state.compact_deadline_checks();
        Some((left, holder))
    }

    /// How many locks the watchdog renews or watches now.
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

impl NoticeSink {
    /// Someone force-released `name` while `holder` held it and its token counter stood at
    /// `token` (0 when unknown): if that is a chain in this process, it is lost. (Holder ids
    /// are unique to a chain; the token is checked too for notices from older versions,
    /// whose holder ids were the same for every chain of a thread.)
    pub(crate) fn force_released(&self, name: &str, holder: &str, token: u64) {
        let shared = &*self.0;
        let mut state = shared.state.lock();
        let ours = state.entries.get(name).is_some_and(|entry| {
            &*entry.holder == holder && (token == 0 || token >= entry.lease.token())
        });
        if ours {
            state.lose(name, LostReason::ForceReleased);
            shared.work_arrived.notify_one();
        }
    }
}

impl Shared {
    fn run(&self) {
        let mut due = Vec::new();
        loop {
            match self.next_work(&mut due) {
                None => return,
                Some(Work::Tell(reports)) => self.tell(reports),
                Some(Work::Renew {
                    batch,
                    sent_at,
                    answer_by,
                }) => {
                    let outcomes = self.renew(&batch, answer_by);
                    self.apply(&batch, outcomes, sent_at);
                }
            }
        }
    }

    /// Sleeps until there is work; `None` when the watchdog stops. Losses are told before a
    /// batch is taken, so a slow callback never holds up a batch that releases wait for.
    fn next_work(&self, due: &mut Vec<(Arc<str>, u64)>) -> Option<Work> {
        let mut state = self.state.lock();
        loop {
            if state.stopping {
                return None;
            }
            if !state.reports.is_empty() {
                return Some(Work::Tell(std::mem::take(&mut state.reports)));
            }
            let now = Instant::now();
            state.check_deadlines(now);
            state.schedule.wheel.collect(now, due);
            let batch = state.take_batch(due, now);
            if !batch.is_empty() {
                // Never wait for answers past a deadline the thread must meet: the earliest
                // lease deadline of the batch, or any deadline check due sooner.
                let mut answer_by = now + self.pool.response_timeout();
                for renewal in &batch {
                    answer_by = answer_by.min(renewal.lease_deadline);
                }
                if let Some(check) = state.next_deadline_check() {
                    answer_by = answer_by.min(check);
                }
                return Some(Work::Renew {
                    batch,
                    sent_at: now,
                    answer_by,
                });
            }
            if !state.reports.is_empty() {
                continue;
            }
            let next_due = state.schedule.next_due();
            state.schedule.thread = ThreadState::Sleeping { until: next_due };
            match next_due {
                Some(at) => {
                    self.work_arrived.wait_until(&mut state, at);
                }
                None => self.work_arrived.wait(&mut state),
            }
            state.schedule.thread = ThreadState::Working;
        }
    }

    /// Logs every loss and hands it to the callback.
    fn tell(&self, reports: Vec<LostLock>) {
        for lost_lock in reports {
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

    /// Sends the renewals of `batch` in one pipeline and reads the answers until
    /// `answer_by`; one outcome per renewal.
    fn renew(&self, batch: &[Renewal], answer_by: Instant) -> Vec<Outcome> {
        let lease_ms = self.timeout_ms.to_string();
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
            .run_before(answer_by, |connection| {
                evalsha_pipelined(connection, &RENEW, &calls, answer_by)
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

    /// Records the outcomes and schedules what comes next.
    fn apply(&self, batch: &[Renewal], outcomes: Vec<Outcome>, sent_at: Instant) {
        let retry_delay =
            (self.interval / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut state = self.state.lock();
        let now = Instant::now();
        for (renewal, outcome) in batch.iter().zip(outcomes) {
            let State {
                entries, schedule, ..
            } = &mut *state;
            let Some(entry) = entries.get_mut(&renewal.name) else {
                continue;
            };
            if entry.chain != renewal.chain {
                continue;
            }
            entry.renewing = false;
            if entry.lease.is_marked_lost() {
                // Told while the renewal was out (a force-release notice).
                entries.remove(&renewal.name);
                continue;
            }
            let deadline = entry.lease.deadline();
            if now >= deadline {
                // A guard past its deadline already reads as lost: whatever came back, a
                // lost chain stays lost.
                state.lose(&renewal.name, LostReason::LeaseExpired);
                continue;
            }
            let reason = match outcome {
                Outcome::Renewed => {
                    entry.lease.extend(sent_at, self.timeout);
                    schedule.renewal(&renewal.name, entry, sent_at + self.interval);
                    continue;
                }
                Outcome::Failed => {
                    schedule.renewal(&renewal.name, entry, (now + retry_delay).min(deadline));
                    schedule.deadline_check(&renewal.name, entry);
                    continue;
                }
                Outcome::HolderGone => LostReason::NotHeldAnymore,
            };
            state.lose(&renewal.name, reason);
        }
        drop(state);
        self.renewal_done.notify_all();
    }
}

impl State {
    /// Records that the chain of `name` is lost and queues it for the callback (once). The
    /// entry goes, unless a renewal of it is in flight: it goes when that comes back.
    fn lose(&mut self, name: &str, reason: LostReason) {
        let Some(entry) = self.entries.get(name) else {
            return;
        };
        if entry.lease.mark_lost(reason) {
            self.reports.push(LostLock {
                name: name.to_owned(),
                holder: entry.holder.to_string(),
                reason,
            });
        }
        if !entry.renewing {
            self.entries.remove(name);
        }
    }

    /// Gives up every chain whose deadline check is due and whose lease has run out.
    fn check_deadlines(&mut self, now: Instant) {
        while let Some(Reverse((at, _, _))) = self.schedule.deadlines.peek() {
            if *at > now {
                return;
            }
            let Some(Reverse((at, chain, name))) = self.schedule.deadlines.pop() else {
                return;
            };
            let Some(entry) = self.entries.get_mut(&name) else {
                continue;
            };
            if entry.chain != chain || entry.deadline_check != Some(at) {
                continue; // superseded by a later check
            }
            entry.deadline_check = None;
            if entry.lease.deadline() <= now {
                self.lose(&name, LostReason::LeaseExpired);
            }
        }
    }

    /// Whether the heap item `(at, chain, name)` is the current check of a live entry.
    fn is_current_check(&self, at: Instant, chain: u64, name: &str) -> bool {
        self.entries
            .get(name)
            .is_some_and(|entry| entry.chain == chain && entry.deadline_check == Some(at))
    }

    /// When the next current deadline check falls due; superseded items on top go.
    fn next_deadline_check(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, chain, name))) = self.schedule.deadlines.peek() {
            if self.is_current_check(*at, *chain, name) {
                return Some(*at);
            }
            self.schedule.deadlines.pop();
        }
        None
    }

    /// Drops superseded deadline checks once they outnumber the entries: checks of released
    /// chains would otherwise wait in the heap until their (possibly far) deadlines.
    fn compact_deadline_checks(&mut self) {
        if self.schedule.deadlines.len() <= 2 * self.entries.len() + 64 {
            return;
        }
        let mut deadlines = std::mem::take(&mut self.schedule.deadlines);
        deadlines.retain(|Reverse((at, chain, name))| self.is_current_check(*at, *chain, name));
        self.schedule.deadlines = deadlines;
    }

    /// Turns the due wheel items into a renewal batch, marking their entries as renewing.
    /// Stale items (of released or replaced entries) are dropped; entries past their deadline
    /// are given up rather than renewed (this process was paused, or the thread was late).
    fn take_batch(&mut self, due: &mut Vec<(Arc<str>, u64)>, now: Instant) -> Vec<Renewal> {
        let mut batch = Vec::new();
        for (name, ticket) in due.drain(..) {
            let Some(entry) = self.entries.get_mut(&name) else {
                continue;
            };
            if entry.ticket != ticket || entry.renewing {
                continue;
            }
            if entry.renewed_levels == 0 {
                // Only fixed-lease levels are left: nothing to renew, a deadline to watch.
                self.schedule.deadline_check(&name, entry);
                continue;
            }
            let lease_deadline = entry.lease.deadline();
            if lease_deadline <= now {
                self.lose(&name, LostReason::LeaseExpired);
                continue;
            }
            entry.renewing = true;
            batch.push(Renewal {
                holder: Arc::clone(&entry.holder),
                chain: entry.chain,
                lease_deadline,
                name,
            });
        }
        batch
    }
}

impl Schedule {
    fn next_number(&mut self) -> u64 {
        self.last_number += 1;
        self.last_number
    }

    /// Makes a renewal of `entry` at `at` its one current wheel item. Answers whether the
    /// thread must be woken for it.
    fn renewal(&mut self, name: &Arc<str>, entry: &mut Entry, at: Instant) -> bool {
        entry.ticket = self.next_number();
        self.wheel.insert(at, (Arc::clone(name), entry.ticket));
        self.wakes_too_late_for(at)
    }

    /// Queues a check of `entry`'s lease deadline, unless one is queued for it already.
    /// Answers whether the thread must be woken for it.
    fn deadline_check(&mut self, name: &Arc<str>, entry: &mut Entry) -> bool {
        let deadline = entry.lease.deadline();
        if entry.deadline_check == Some(deadline) {
            return false;
        }
        entry.deadline_check = Some(deadline);
        self.deadlines
            .push(Reverse((deadline, entry.chain, Arc::clone(name))));
        self.wakes_too_late_for(deadline)
    }

    fn wakes_too_late_for(&self, due: Instant) -> bool {
        match self.thread {
            ThreadState::Working => false,
            ThreadState::Sleeping { until: None } => true,
            ThreadState::Sleeping { until: Some(until) } => due < until,
        }
    }

    /// When the thread has something to do next, if ever.
    fn next_due(&self) -> Option<Instant> {
        let deadline = self.deadlines.peek().map(|Reverse((at, _, _))| *at);
        match (self.wheel.next_due(), deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
