//! What [`Stats`](crate::Stats) counts, reported as it happens through the
//! [`metrics`](https://docs.rs/metrics) facade when the `metrics` feature is on, to whatever
//! recorder the application installed (a Prometheus, StatsD or OpenTelemetry exporter).
//! Without the feature every function here is empty, and costs nothing.
//!
//! The parts that do the work call in here (the wait loop, the watchdog, the pub/sub
//! listener, the cleanup thread); this module calls nothing of the crate. The names and
//! labels are documented on [`LockManager::stats`](crate::LockManager::stats).

use std::time::Duration;

use crate::error::{LostReason, RiskReason};

/// An acquisition that waited `waited`.
#[inline]
pub(crate) fn acquired(waited: Duration) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("redlease_acquisitions_total").increment(1);
        metrics::histogram!("redlease_wait_seconds").record(waited.as_secs_f64());
    }
    let _ = waited;
}

/// A hold (a thread's chain of levels) that ended, released or lost, after `held`.
#[inline]
pub(crate) fn held(held: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("redlease_hold_seconds").record(held.as_secs_f64());
    let _ = held;
}

/// A renewal batch that took `took`, from its send to its last answer.
#[inline]
pub(crate) fn renewal_answered(took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("redlease_renewal_seconds").record(took.as_secs_f64());
    let _ = took;
}

/// A renewal batch of `sent` holds, `failed` of them without a usable answer.
#[inline]
pub(crate) fn renewed(sent: u64, failed: u64) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("redlease_renewals_total").increment(sent);
        metrics::counter!("redlease_renewal_failures_total").increment(failed);
    }
    let _ = (sent, failed);
}

/// A hold raised at risk for `reason`.
#[inline]
pub(crate) fn at_risk(reason: RiskReason) {
    #[cfg(feature = "metrics")]
    {
        let reason = match reason {
            RiskReason::Unreachable => "unreachable",
            RiskReason::Unanswered => "unanswered",
            RiskReason::Failover => "failover",
            RiskReason::Refused => "refused",
        };
        metrics::counter!("redlease_at_risk_total", "reason" => reason).increment(1);
    }
    let _ = reason;
}

/// A hold at risk renewed again.
#[inline]
pub(crate) fn risk_cleared() {
    #[cfg(feature = "metrics")]
    metrics::counter!("redlease_risk_cleared_total").increment(1);
}

/// A hold whose holder was asked to let go.
#[inline]
pub(crate) fn revocation_requested() {
    #[cfg(feature = "metrics")]
    metrics::counter!("redlease_revocations_requested_total").increment(1);
}

/// A waiting thread took a lock a release handed it.
#[inline]
pub(crate) fn handoff() {
    #[cfg(feature = "metrics")]
    metrics::counter!("redlease_handoffs_total").increment(1);
}

/// A hold lost for `reason`.
#[inline]
pub(crate) fn lost(reason: LostReason) {
    #[cfg(feature = "metrics")]
    {
        let reason = match reason {
            LostReason::NotHeldAnymore => "not_held_anymore",
            LostReason::LeaseExpired => "lease_expired",
            LostReason::ForceReleased => "force_released",
        };
        metrics::counter!("redlease_lost_total", "reason" => reason).increment(1);
    }
    let _ = reason;
}

/// A pub/sub connection made again.
#[inline]
pub(crate) fn pubsub_reconnected() {
    #[cfg(feature = "metrics")]
    metrics::counter!("redlease_pubsub_reconnects_total").increment(1);
}

/// An undo of the cleanup thread ended: answered by Redis (`done`), or given up.
#[inline]
pub(crate) fn cleanup_ended(done: bool) {
    #[cfg(feature = "metrics")]
    {
        let outcome = if done { "done" } else { "abandoned" };
        metrics::counter!("redlease_cleanups_total", "outcome" => outcome).increment(1);
    }
    let _ = done;
}
