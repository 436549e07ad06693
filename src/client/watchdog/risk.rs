//! Risk reporting: raising and clearing a chain's risk as its renewals fail and succeed,
//! queuing the notices, and telling the log and the risk callback.
//!
//! The risk is recorded on the chain's [`LeaseState`](crate::client::watchdog::lease::LeaseState) at
//! once (guards read it there, and its signals fire then); the notices are told on the
//! watchdog thread outside the state lock, before the losses queued with them, so a slow
//! callback holds up no caller; a panicking one is contained and logged.

use crate::client::watchdog::lease::{RiskChange, RiskNotice};
use crate::error::RiskReason;

use super::registry::Entry;
use super::RiskCallback;

/// How many times holds were raised at risk and cleared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RiskCounts {
    pub(crate) raised: u64,
    pub(crate) cleared: u64,
}

/// Risk changes recorded and not yet told.
#[derive(Default)]
pub(super) struct RiskReports {
    pending: Vec<RiskNotice>,
    counts: RiskCounts,
}

impl RiskReports {
    /// A renewal of `entry` failed for `reason`: raises its risk unless it stands already.
    pub(super) fn renewal_failed(&mut self, entry: &Entry, reason: RiskReason) {
        if entry.lease.raise_risk(reason) {
            self.counts.raised += 1;
            crate::client::telemetry::at_risk(reason);
            self.queue(entry, RiskChange::AtRisk(reason));
        }
    }

    /// A renewal of `entry` succeeded: clears its risk if it stood.
    pub(super) fn renewed(&mut self, entry: &Entry) {
        if entry.lease.clear_risk() {
            self.counts.cleared += 1;
            crate::client::telemetry::risk_cleared();
            self.queue(entry, RiskChange::Cleared);
        }
    }

    fn queue(&mut self, entry: &Entry, change: RiskChange) {
        self.pending.push(RiskNotice {
            name: entry.name.to_string(),
            holder: entry.holder.to_string(),
            fencing_token: entry.lease.token(),
            change,
        });
    }

    pub(super) fn counts(&self) -> RiskCounts {
        self.counts
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub(super) fn take(&mut self) -> Vec<RiskNotice> {
        std::mem::take(&mut self.pending)
    }
}

/// Logs every change and hands it to the callback.
pub(super) fn tell(notices: Vec<RiskNotice>, on_risk: Option<&RiskCallback>) {
    for notice in notices {
        match notice.change {
            RiskChange::AtRisk(reason) => log::warn!(
                "lock {:?} held by {} is at risk: {reason}; renewals go on until its lease ends",
                notice.name,
                notice.holder,
            ),
            RiskChange::Cleared => log::info!(
                "lock {:?} held by {} is renewed again",
                notice.name,
                notice.holder
            ),
        }
        if let Some(on_risk) = on_risk {
            super::call_contained("risk", &notice.name, || on_risk(&notice));
        }
    }
}
