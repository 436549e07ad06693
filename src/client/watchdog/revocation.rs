//! Revocation requests: marking the chains a request names as asked to let go, queuing the
//! notices, and telling the log and the revocation callback. Cooperative: nothing is
//! released here; the holder decides.
//!
//! The request is recorded on the chain's [`LeaseState`](crate::client::watchdog::lease::LeaseState)
//! at once, on the pub/sub listener's thread (guards read it there, and its signals fire
//! then); the notices are told on the watchdog thread, as risks and losses are.

use crate::client::watchdog::lease::RevocationNotice;

use super::registry::Entry;
use super::RevocationCallback;

/// Revocation requests recorded and not yet told.
#[derive(Default)]
pub(super) struct RevocationReports {
    pending: Vec<RevocationNotice>,
    /// Chains asked so far.
    requested: u64,
}

impl RevocationReports {
    /// Someone asked the holder of `entry` to let go: records it unless it was asked before.
    /// Answers whether this was the first request.
    pub(super) fn requested(&mut self, entry: &Entry) -> bool {
        if !entry.lease.request_revocation() {
            return false;
        }
        self.requested += 1;
        crate::client::telemetry::revocation_requested();
        self.pending.push(RevocationNotice {
            name: entry.name.to_string(),
            holder: entry.holder.to_string(),
            fencing_token: entry.lease.token(),
        });
        true
    }

    pub(super) fn count(&self) -> u64 {
        self.requested
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub(super) fn take(&mut self) -> Vec<RevocationNotice> {
        std::mem::take(&mut self.pending)
    }
}

/// Logs every request and hands it to the callback.
pub(super) fn tell(notices: Vec<RevocationNotice>, on_revocation: Option<&RevocationCallback>) {
    for notice in notices {
        log::info!(
            "lock {:?} held by {}: its release was asked for",
            notice.name,
            notice.holder
        );
        if let Some(on_revocation) = on_revocation {
            super::call_contained("revocation", &notice.name, || on_revocation(&notice));
        }
    }
}
