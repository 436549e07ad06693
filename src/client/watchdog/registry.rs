//! The registry of watched chains, keyed by watch key (the counterpart of Redisson's
//! `EXPIRATION_RENEWAL_MAP`), a key of the primitive's making: the lock name and the thread
//! that holds it (a lock, a fair lock, a write lock, a thread's read levels), or a permit's
//! id.
//!
//! An [`Entry`] is one acquisition chain held in this process: what it holds (the primitive's
//! name and kind of hold, which decide how it is renewed), its holder id, the thread that
//! holds it, how many reentrant levels asked for the watchdog and how many took a fixed
//! lease, the shared [`LeaseState`] with the chain's deadline and fencing token, whether a
//! renewal of it is on the wire, and when the schedule expects to look at it next. Chains are
//! numbered so that a later chain of the same name is told apart from an earlier one.
//!
//! The entries live in slots: the schedule and the renewals refer to an entry by its
//! [`Slot`] (with its chain number), so that renewing many holds looks each up by index;
//! a key leads to its slot for the calls that come with a key.
//!
//! Plain data: no I/O; the clock is read only when a chain starts and ends (its hold's
//! length, counted into a histogram of atomics). The fields are read and written by the facade, the
//! thread loop, the schedule (`renewal_due`, `lease_end_due` only) and the loss reporting.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::stats::{Histogram, Percentiles};
use crate::client::watchdog::lease::LeaseState;
use crate::protocol::renew::HoldKind;

pub(super) struct Entry {
    /// Its key in the registry.
    pub(super) key: Arc<str>,
    /// The name of the primitive held (the key is not always the name).
    pub(super) name: Arc<str>,
    pub(super) kind: HoldKind,
    /// Tells this acquisition chain from earlier and later ones of the same name.
    pub(super) chain: u64,
    pub(super) holder: Arc<str>,
    /// The thread (number) that holds it.
    pub(super) thread: u64,
    /// Carries the chain's fencing token and its deadline.
    pub(super) lease: Arc<LeaseState>,
    /// When the chain's first level was granted (here).
    pub(super) since: Instant,
    /// Reentrant levels of the holder that asked for the watchdog...
    pub(super) renewed_levels: u32,
    /// ... and that took a fixed lease.
    pub(super) fixed_levels: u32,
    /// A renewal of this entry is on the wire.
    pub(super) renewing: bool,
    /// When the renewal queued for this entry falls due, if one is; queued items for other
    /// instants are stale (see the schedule).
    pub(super) renewal_due: Option<Instant>,
    /// Likewise for the check of its lease deadline.
    pub(super) lease_end_due: Option<Instant>,
}

impl Entry {
    /// Ends one level of the chain (a `fixed`-lease one, or a renewed one); answers the
    /// levels left.
    pub(super) fn end_level(&mut self, fixed: bool) -> super::LevelsLeft {
        if fixed {
            self.fixed_levels = self.fixed_levels.saturating_sub(1);
        } else {
            self.renewed_levels = self.renewed_levels.saturating_sub(1);
        }
        super::LevelsLeft {
            renewed: self.renewed_levels,
            fixed: self.fixed_levels,
        }
    }

    /// How many levels the holder holds.
    pub(super) fn levels(&self) -> u32 {
        self.renewed_levels + self.fixed_levels
    }
}

/// Where an entry lives in the registry: what the schedule and the renewals refer to it by,
/// with its chain number (a slot given to a later chain holds another number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Slot(usize);

/// The entries, in slots (so that the renewal of 100 000 holds looks each up by its index,
/// not by hashing its key for the schedule, the batch and the outcome), and the slot of each
/// key.
#[derive(Default)]
pub(super) struct Registry {
    slots: Vec<Option<Entry>>,
    /// Slots emptied, for the next entries.
    free: Vec<usize>,
    by_key: HashMap<Arc<str>, Slot>,
    /// The number of the latest chain.
    last_chain: u64,
    /// How long the chains removed were held, from their first level's grant.
    hold_times: Histogram,
}

impl Registry {
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// How long the chains removed so far were held.
    pub(super) fn hold_times(&self) -> Percentiles {
        self.hold_times.percentiles()
    }

    pub(super) fn get(&self, key: &str) -> Option<&Entry> {
        self.at(*self.by_key.get(key)?)
    }

    /// The entry under `key`, and its slot.
    pub(super) fn find_mut(&mut self, key: &str) -> Option<(Slot, &mut Entry)> {
        let slot = *self.by_key.get(key)?;
        Some((slot, self.at_mut(slot)?))
    }

    /// The entry in `slot`, if there is one.
    pub(super) fn at(&self, slot: Slot) -> Option<&Entry> {
        self.slots.get(slot.0)?.as_ref()
    }

    /// The entry in `slot`, if there is one.
    pub(super) fn at_mut(&mut self, slot: Slot) -> Option<&mut Entry> {
        self.slots.get_mut(slot.0)?.as_mut()
    }

    /// How many entries are at risk now.
    pub(super) fn at_risk(&self) -> usize {
        let at_risk = |entry: &&Entry| entry.lease.risk().is_some();
        self.entries().filter(at_risk).count()
    }

    fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().flatten()
    }

    /// Removes the entry under `key`: answers how long its chain was held (counted into the
    /// hold times already; the caller reports it to the metrics once it holds no lock).
    pub(super) fn remove(&mut self, key: &str) -> Option<Duration> {
        let slot = self.by_key.remove(key)?;
        let held = self.slots[slot.0].take().map(|entry| self.ended(&entry));
        self.free.push(slot.0);
        held
    }

    /// Counts the end of `entry`'s chain into the hold times: how long it was held.
    fn ended(&self, entry: &Entry) -> Duration {
        let held = entry.since.elapsed();
        self.hold_times.record(held);
        held
    }

    /// The keys of the entries of `name` held by `holder` (a read chain's key is not the
    /// name), looked for among all entries: for rare events only.
    pub(super) fn find_all(&self, name: &str, holder: &str) -> Vec<Arc<str>> {
        self.entries()
            .filter(|entry| &*entry.name == name && &*entry.holder == holder)
            .map(|entry| Arc::clone(&entry.key))
            .collect()
    }

    /// Starts a new chain under `key` with its first level, replacing any entry of the key
    /// (a renewal of the replaced entry still in flight is told apart by its chain number).
    pub(super) fn start_chain(
        &mut self,
        key: Arc<str>,
        holding: &super::Holding<'_>,
        lease: Arc<LeaseState>,
        fixed: bool,
    ) -> (Slot, &mut Entry) {
        self.last_chain += 1;
        let entry = Entry {
            key: Arc::clone(&key),
            name: Arc::from(holding.name),
            kind: holding.kind,
            chain: self.last_chain,
            holder: Arc::from(holding.holder),
            thread: holding.thread,
            lease,
            since: Instant::now(),
            renewed_levels: u32::from(!fixed),
            fixed_levels: u32::from(fixed),
            renewing: false,
            renewal_due: None,
            lease_end_due: None,
        };
        let slot = match self.by_key.get(&key) {
            Some(&slot) => slot,
            None => {
                let slot = match self.free.pop() {
                    Some(index) => Slot(index),
                    None => {
                        self.slots.push(None);
                        Slot(self.slots.len() - 1)
                    }
                };
                self.by_key.insert(key, slot);
                slot
            }
        };
        // A chain replaced under its key (lost, its renewal still out) ends here.
        if let Some(replaced) = self.slots[slot.0].take() {
            self.ended(&replaced);
        }
        let entry = self.slots[slot.0].insert(entry);
        (slot, entry)
    }
}
