//! When the watchdog thread has something to do: renewals, batched by tick, and lease-end
//! checks, to the instant; and whether new work must wake the thread.
//!
//! Two queues, on purpose. Renewals go into a [`TimerWheel`], which rounds each up to the next
//! tick, so every renewal due within one tick comes out at once and goes out as one pipeline:
//! 100 000 locks cost one round trip per tick, not one each. A lease-end check must fire at
//! its instant, and while a renewal batch is on the wire the thread stops waiting for its
//! answers at the next one ([`Schedule::next_lease_end`]): that is a peek at a heap of lease
//! ends, where in a single queue the first lease end could sit behind thousands of renewals
//! that must not cut the wait short.
//!
//! Both queues hold [`Due`] items under one invalidation rule: an item counts only while its
//! entry, of the same chain, still expects it at that instant (`Entry::renewal_due`,
//! `Entry::lease_end_due`). Rescheduling overwrites what the entry expects, and released or
//! replaced entries expect nothing, so nothing is ever searched for and removed: stale items
//! are skipped when they come out, and lease-end checks, which may lie far ahead, are
//! compacted away once they outnumber the entries.
//!
//! Touches only the two expectation fields of entries and reads their lease deadlines; no
//! I/O, no clock reads.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::registry::{Entry, Registry, Slot};
use super::wheel::TimerWheel;

/// Ticks per renewal interval: renewals due within one tick go out together, at most a
/// sixteenth of the interval late (the lease has two intervals of margin).
const TICKS_PER_INTERVAL: u32 = 16;
/// Slots of the timer wheel: one turn spans four intervals.
const WHEEL_SLOTS: usize = 64;

/// A queued look at the entry in `slot` of chain `chain` at `at`.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    at: Instant,
    chain: u64,
    slot: Slot,
}

pub(super) struct Schedule {
    renewals: TimerWheel<Due>,
    lease_ends: BinaryHeap<Reverse<Due>>,
    /// What the watchdog thread is doing, so that new work wakes it only when it must.
    thread: ThreadState,
    /// Scratch space for collecting the wheel.
    collected: Vec<Due>,
}

#[derive(Clone, Copy)]
enum ThreadState {
    /// It looks at the schedule before it sleeps again: no need to wake it.
    Working,
    /// It sleeps until the given instant (or until woken); earlier work must wake it.
    Sleeping { until: Option<Instant> },
}

/// The entries whose queued work came out, current items only.
#[derive(Default)]
pub(super) struct DueNow {
    /// Slots of entries whose renewal is due.
    pub(super) renewals: Vec<Slot>,
    /// Slots of entries whose lease deadline is to be checked.
    pub(super) lease_ends: Vec<Slot>,
}

impl Schedule {
    pub(super) fn new(now: Instant, interval: Duration) -> Self {
        let tick = (interval / TICKS_PER_INTERVAL).max(Duration::from_millis(1));
        Schedule {
            renewals: TimerWheel::new(now, tick, WHEEL_SLOTS),
            lease_ends: BinaryHeap::new(),
            thread: ThreadState::Working,
            collected: Vec::new(),
        }
    }

    /// Makes a renewal of `entry` at `at` the one it expects. Answers whether the thread must
    /// be woken for it.
    pub(super) fn renewal(&mut self, slot: Slot, entry: &mut Entry, at: Instant) -> bool {
        if entry.renewal_due != Some(at) {
            entry.renewal_due = Some(at);
            self.renewals.insert(at, due(at, entry, slot));
        }
        self.wakes_too_late_for(at)
    }

    /// Makes a check of `entry`'s lease deadline, as it stands, the one it expects. Answers
    /// whether the thread must be woken for it.
    pub(super) fn lease_end(&mut self, slot: Slot, entry: &mut Entry) -> bool {
        let at = entry.lease.deadline();
        if entry.lease_end_due == Some(at) {
            return false;
        }
        entry.lease_end_due = Some(at);
        self.lease_ends.push(Reverse(due(at, entry, slot)));
        self.wakes_too_late_for(at)
    }

    /// Takes the work due at `now` into `due_now`; stale items go. An entry no longer expects
    /// what came out for it.
    pub(super) fn take_due(&mut self, now: Instant, registry: &mut Registry, due_now: &mut DueNow) {
        while let Some(Reverse(item)) = self.lease_ends.peek() {
            if item.at > now {
                break;
            }
            let Some(Reverse(item)) = self.lease_ends.pop() else {
                break;
            };
            if let Some(entry) = registry.at_mut(item.slot) {
                if item.is_expected_by(entry, entry.lease_end_due) {
                    entry.lease_end_due = None;
                    due_now.lease_ends.push(item.slot);
                }
            }
        }
        self.renewals.collect(now, &mut self.collected);
        for item in self.collected.drain(..) {
            if let Some(entry) = registry.at_mut(item.slot) {
                if item.is_expected_by(entry, entry.renewal_due) {
                    entry.renewal_due = None;
                    due_now.renewals.push(item.slot);
                }
            }
        }
    }

    /// When the next current lease-end check falls due; stale items on top go.
    pub(super) fn next_lease_end(&mut self, registry: &Registry) -> Option<Instant> {
        while let Some(Reverse(item)) = self.lease_ends.peek() {
            if is_current_lease_end(item, registry) {
                return Some(item.at);
            }
            self.lease_ends.pop();
        }
        None
    }

    /// Drops stale lease-end checks once they outnumber the entries: checks of released
    /// chains would otherwise wait until their (possibly far) deadlines. (Stale renewals come
    /// out within an interval or so.)
    pub(super) fn compact(&mut self, registry: &Registry) {
        if self.lease_ends.len() <= 2 * registry.len() + 64 {
            return;
        }
        self.lease_ends
            .retain(|Reverse(item)| is_current_lease_end(item, registry));
    }

    /// When the thread has something to do next, if ever (possibly a stale item).
    pub(super) fn next_due(&self) -> Option<Instant> {
        let lease_end = self.lease_ends.peek().map(|Reverse(item)| item.at);
        earliest(self.renewals.next_due(), lease_end)
    }

    /// Records that the thread sleeps until `until` (or until woken).
    pub(super) fn thread_sleeps(&mut self, until: Option<Instant>) {
        self.thread = ThreadState::Sleeping { until };
    }

    /// Records that the thread is awake and looks at the schedule before it sleeps again.
    pub(super) fn thread_works(&mut self) {
        self.thread = ThreadState::Working;
    }

    /// Whether work due at `due` must wake the thread: it sleeps past it.
    pub(super) fn wakes_too_late_for(&self, due: Instant) -> bool {
        match self.thread {
            ThreadState::Working => false,
            ThreadState::Sleeping { until: None } => true,
            ThreadState::Sleeping { until: Some(until) } => due < until,
        }
    }
}

/// The earlier of two optional instants.
pub(super) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn due(at: Instant, entry: &Entry, slot: Slot) -> Due {
    Due {
        at,
        chain: entry.chain,
        slot,
    }
}

impl Due {
    /// The one invalidation rule: the item is current while its entry, of the same chain,
    /// still `expects` it at that instant.
    fn is_expected_by(&self, entry: &Entry, expects: Option<Instant>) -> bool {
        entry.chain == self.chain && expects == Some(self.at)
    }
}

fn is_current_lease_end(item: &Due, registry: &Registry) -> bool {
    registry
        .at(item.slot)
        .is_some_and(|entry| item.is_expected_by(entry, entry.lease_end_due))
}
