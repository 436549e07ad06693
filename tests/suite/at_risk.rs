//! The at-risk signal: a renewal that fails while the lease may still hold raises it on every
//! form (the guard's flag, its risk channel, the manager's callback, the stats) within one
//! renewal interval of the renewal that did not come through; a renewal that succeeds again clears it; a hold
//! whose renewals fail until its deadline is lost then, after the risk, never before. Tried
//! with a real server paused by SIGSTOP, for a lock, a permit and a multi-lock.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, server};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use redlease::{LockManager, LostReason, MultiLock, RiskChange, RiskNotice, RiskReason};

/// How long the tests give a "no hang" condition.
const PATIENCE: Duration = Duration::from_secs(10);

/// The response timeout of these managers: a renewal sent to a paused server fails after it.
const RESPONSE: Duration = Duration::from_millis(300);

/// A manager with watchdog timeout `watchdog` (renewals every third of it) and a short
/// response timeout, whose risk callback sends every notice to the receiver answered.
fn manager_telling_risks(
    redis: &common::RedisServer,
    watchdog: Duration,
) -> (LockManager, Receiver<RiskNotice>) {
    let (tell, told) = crossbeam_channel::unbounded();
    let manager = LockManager::builder(redis.url())
        .connect_timeout(RESPONSE)
        .response_timeout(RESPONSE)
        .watchdog_timeout(watchdog)
        .outage_grace(Duration::from_secs(1))
        .on_risk_change(move |notice| {
            let _ = tell.send(notice.clone());
        })
        .build()
        .expect("build manager");
    (manager, told)
}

/// The next risk change on `signal`, which must come within `within`.
fn next_change(signal: &Receiver<RiskChange>, within: Duration) -> RiskChange {
    match signal.recv_timeout(within) {
        Ok(change) => change,
        Err(err) => panic!("no risk change within {within:?}: {err:?}"),
    }
}

/// A change the server's pause causes: a renewal unanswered, or a new connection that could
/// not be made in time.
fn is_pause_reason(change: RiskChange) -> bool {
    matches!(
        change,
        RiskChange::AtRisk(RiskReason::Unanswered | RiskReason::Unreachable)
    )
}

#[test]
fn a_paused_server_puts_holds_at_risk_within_a_renewal_interval_and_loses_them_at_their_deadline() {
    let mut redis = server();
    let watchdog = Duration::from_secs(6);
    let interval = watchdog / 3;
    let (manager, told) = manager_telling_risks(&redis, watchdog);
    let guard = manager.lock("at-risk").lock().unwrap();
    let permits = manager.permit_semaphore("at-risk-permits");
    assert!(permits.try_set_permits(1).unwrap());
    let permit = permits.lock().unwrap();
    let (risk, lost) = (guard.risk_signal(), guard.lost_signal());
    let permit_risk = permit.risk_signal();
    assert!(!guard.is_at_risk() && !permit.is_at_risk());

    redis.pause().unwrap();
    let paused_at = Instant::now();
    // The next renewal is due within one interval, and the risk is raised within one more
    // (it fails after the response timeout, behind at most one other pipeline that does).
    let bound = interval * 2;
    let change = next_change(&risk, bound);
    let raised_after = paused_at.elapsed();
    assert!(is_pause_reason(change), "{change:?}");
    let (seen_at, valid) = (Instant::now(), guard.valid_for());
    let deadline_at_least = seen_at + valid;
    assert!(guard.is_at_risk());
    assert!(!guard.is_lost(), "at risk, not lost: {valid:?} left");
    assert!(valid > Duration::ZERO);
    assert!(is_pause_reason(next_change(&permit_risk, bound)));
    assert!(permit.is_at_risk());
    let stats = manager.stats();
    assert_eq!(stats.at_risk, 2, "{stats:?}");
    assert_eq!(stats.risks_raised, 2, "{stats:?}");
    let notice = told.recv_timeout(PATIENCE).expect("the callback was told");
    assert!(is_pause_reason(notice.change), "{notice:?}");
    assert!(["at-risk", "at-risk-permits"].contains(&notice.name.as_str()));

    // No renewal gets through: lost at the deadline, not before, and the risk channel ends.
    let reason = lost.recv_timeout(watchdog + PATIENCE).expect("lost");
    let lost_at = Instant::now();
    assert_eq!(reason, LostReason::LeaseExpired);
    assert!(
        lost_at >= deadline_at_least,
        "lost {:?} before the deadline valid_for promised",
        deadline_at_least - lost_at
    );
    assert_eq!(
        risk.recv_timeout(PATIENCE),
        Err(RecvTimeoutError::Disconnected),
        "the risk channel ends with the loss"
    );
    assert!(guard.is_at_risk(), "a lost hold is at risk too");
    assert!(guard.valid_for().is_zero());
    eprintln!("at risk {raised_after:?} after the pause (renewal interval {interval:?})");

    redis.resume().unwrap();
    drop((guard, permit));
    redis.kill().unwrap();
}

#[test]
fn the_risk_clears_when_the_server_answers_again_before_the_deadline() {
    let redis = server();
    let watchdog = Duration::from_secs(6);
    let interval = watchdog / 3;
    let (manager, told) = manager_telling_risks(&redis, watchdog);
    let guard = manager.lock("recovers").lock().unwrap();
    let risk = guard.risk_signal();

    redis.pause().unwrap();
    let change = next_change(&risk, interval + RESPONSE + Duration::from_millis(500));
    assert!(is_pause_reason(change), "{change:?}");
    assert!(guard.is_at_risk());
    // A receiver taken now hears the standing risk first.
    let late = guard.risk_signal();
    assert_eq!(late.try_recv(), Ok(change));
    redis.resume().unwrap();

    assert_eq!(next_change(&risk, PATIENCE), RiskChange::Cleared);
    assert_eq!(next_change(&late, PATIENCE), RiskChange::Cleared);
    assert!(!guard.is_at_risk());
    assert!(!guard.is_lost());
    assert!(
        guard.valid_for() > watchdog / 2,
        "the renewal moved the deadline on"
    );
    let changes: Vec<RiskChange> = (0..2)
        .map(|_| told.recv_timeout(PATIENCE).expect("told").change)
        .collect();
    assert_eq!(changes, [change, RiskChange::Cleared], "in order");
    let stats = manager.stats();
    assert_eq!(
        (stats.at_risk, stats.risks_raised, stats.risks_cleared),
        (0, 1, 1),
        "{stats:?}"
    );
    guard
        .unlock()
        .expect("still held: the outage was shorter than the lease");
}

#[test]
fn a_multi_lock_is_at_risk_while_a_member_is_and_clears_with_it() {
    let (first, second) = (server(), server());
    let watchdog = Duration::from_secs(6);
    let interval = watchdog / 3;
    let (one, _) = manager_telling_risks(&first, watchdog);
    let (two, _) = manager_telling_risks(&second, watchdog);
    let multi = MultiLock::new([one.lock("job"), two.lock("job")]).unwrap();
    let guard = multi.lock().unwrap();
    let risk = guard.risk_signal();

    second.pause().unwrap();
    let change = next_change(&risk, interval + RESPONSE + Duration::from_millis(500));
    assert!(is_pause_reason(change), "{change:?}");
    assert!(guard.is_at_risk() && !guard.is_lost());
    second.resume().unwrap();
    assert_eq!(next_change(&risk, PATIENCE), RiskChange::Cleared);
    assert!(eventually(PATIENCE, || !guard.is_at_risk()));
    guard.unlock().unwrap();
}
