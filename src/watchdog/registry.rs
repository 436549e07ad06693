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
//! Plain data: no I/O, no clock reads. The fields are read and written by the facade, the
//! thread loop, the schedule (`renewal_due`, `lease_end_due` only) and the loss reporting.

use std::collections::{hash_map, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::protocol::renew::HoldKind;
use crate::watchdog::lease::LeaseState;

pub(super) struct Entry {
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
    /// How many levels the holder holds.
    pub(super) fn levels(&self) -> u32 {
        self.renewed_levels + self.fixed_levels
    }
}

#[derive(Default)]
pub(super) struct Registry {
    entries: HashMap<Arc<str>, Entry>,
    /// The number of the latest chain.
    last_chain: u64,
}

impl Registry {
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name)
    }

    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut Entry> {
        self.entries.get_mut(name)
    }

    /// How many entries are at risk now.
    pub(super) fn at_risk(&self) -> usize {
        let at_risk = |entry: &&Entry| entry.lease.risk().is_some();
        self.entries.values().filter(at_risk).count()
    }

    pub(super) fn remove(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// The keys of the entries of `name` held by `holder` (a writer's chain and its read
    /// levels' share one), looked for among all entries: for rare events only.
    pub(super) fn find_all(&self, name: &str, holder: &str) -> Vec<Arc<str>> {
        self.entries
            .iter()
            .filter(|(_, entry)| &*entry.name == name && &*entry.holder == holder)
            .map(|(key, _)| Arc::clone(key))
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
    ) -> &mut Entry {
        self.last_chain += 1;
        let entry = Entry {
            name: Arc::from(holding.name),
            kind: holding.kind,
            chain: self.last_chain,
            holder: Arc::from(holding.holder),
            thread: holding.thread,
            lease,
            renewed_levels: u32::from(!fixed),
            fixed_levels: u32::from(fixed),
            renewing: false,
            renewal_due: None,
            lease_end_due: None,
        };
        match self.entries.entry(key) {
            hash_map::Entry::Occupied(mut occupied) => {
                occupied.insert(entry);
                occupied.into_mut()
            }
            hash_map::Entry::Vacant(vacant) => vacant.insert(entry),
        }
    }
}
