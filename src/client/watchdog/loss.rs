//! Loss reporting: marking a chain lost, queuing the report, and telling the log and the
//! lost-lock callback.
//!
//! A chain is marked lost on its [`LeaseState`](crate::client::watchdog::lease::LeaseState) at once (guards read
//! it there) and reported once; its entry leaves the registry unless a renewal of it is in
//! flight, in which case the renewal's return removes it. Reports are told on the watchdog
//! thread outside the state lock, so a slow callback holds up no caller; a panicking one is
//! contained and logged.

use crate::client::watchdog::lease::LostLock;
use crate::error::LostReason;

use super::registry::Registry;
use super::LostCallback;

/// How many chains were lost, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LostCounts {
    pub(crate) not_held_anymore: u64,
    pub(crate) lease_expired: u64,
    pub(crate) force_released: u64,
}

impl LostCounts {
    fn count(&mut self, reason: LostReason) {
        let counter = match reason {
            LostReason::NotHeldAnymore => &mut self.not_held_anymore,
            LostReason::LeaseExpired => &mut self.lease_expired,
            LostReason::ForceReleased => &mut self.force_released,
        };
        *counter += 1;
    }
}

/// Losses recorded and not yet told.
#[derive(Default)]
pub(super) struct LossReports {
    pending: Vec<LostLock>,
    /// Chains lost so far, by reason.
    lost: LostCounts,
}

impl LossReports {
    /// Records that the chain under `key` is lost and queues it for the callback (once). The
    /// entry goes, unless a renewal of it is in flight: it goes when that comes back.
    pub(super) fn lose(&mut self, registry: &mut Registry, key: &str, reason: LostReason) {
        let Some(entry) = registry.get(key) else {
            return;
        };
        if entry.lease.mark_lost(reason) {
            self.lost.count(reason);
            crate::client::telemetry::lost(reason);
            self.pending.push(LostLock {
                name: entry.name.to_string(),
                holder: entry.holder.to_string(),
                fencing_token: entry.lease.token(),
                reason,
            });
        }
        if !entry.renewing {
            // A loss is rare: its hold's length goes to the metrics here, under the lock.
            if let Some(held) = registry.remove(key) {
                crate::client::telemetry::held(held);
            }
        }
    }

    /// Chains lost so far, by reason.
    pub(super) fn counts(&self) -> LostCounts {
        self.lost
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub(super) fn take(&mut self) -> Vec<LostLock> {
        std::mem::take(&mut self.pending)
    }
}

/// Logs every loss and hands it to the callback.
pub(super) fn tell(reports: Vec<LostLock>, on_lost: Option<&LostCallback>) {
    for lost_lock in reports {
        log::warn!(
            "lock {:?} held by {} was lost: {}",
            lost_lock.name,
            lost_lock.holder,
            lost_lock.reason
        );
        if let Some(on_lost) = on_lost {
            let name = &lost_lock.name;
            super::call_contained("lost-lock", name, || on_lost(&lost_lock));
        }
    }
}
