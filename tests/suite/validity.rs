//! How long a hold is certain for: `valid_for()` never promises more than Redis keeps the key
//! (checked against `PTTL`), is moved on by renewals, counts down with a fixed lease, is zero
//! once the hold is lost; `check_valid_for` refuses a margin the hold cannot cover; every kind
//! of guard answers it.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, manager, server};
use redis::Commands;
use redlease::{Error, LostReason};

/// How long the tests give a "no hang" condition.
const PATIENCE: Duration = Duration::from_secs(10);

/// The key's `PTTL` in Redis, and how long after `before` it was read.
fn pttl_after(server: &common::RedisServer, key: &str, before: Instant) -> (Duration, Duration) {
    let mut redis = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let millis: i64 = redis.pttl(key).unwrap();
    assert!(millis > 0, "the key {key:?} has no expiry left: {millis}");
    (Duration::from_millis(millis as u64), before.elapsed())
}

/// `valid_for()` read at some instant is at most what `PTTL` reads a little later, plus the
/// time in between (and the millisecond `PTTL` rounds down).
fn assert_within_redis_expiry(
    server: &common::RedisServer,
    key: &str,
    guard: &redlease::LockGuard,
) {
    let read_at = Instant::now();
    let valid = guard.valid_for();
    let (pttl, between) = pttl_after(server, key, read_at);
    assert!(
        valid <= pttl + between + Duration::from_millis(1),
        "valid_for {valid:?} promises more than Redis keeps the key: PTTL {pttl:?}, read {between:?} later"
    );
}

#[test]
fn a_renewed_lock_is_valid_for_no_longer_than_redis_keeps_it() {
    let redis = server();
    let watchdog = Duration::from_secs(2);
    let manager = manager(&redis, watchdog);
    let guard = manager.lock("validity").lock().unwrap();
    let first = guard.valid_for();
    assert!(first > Duration::ZERO && first <= watchdog, "{first:?}");
    // Two and a half leases' worth: only renewals keep it valid, each moving it on.
    let until = Instant::now() + watchdog * 5 / 2;
    while Instant::now() < until {
        assert_within_redis_expiry(&redis, "validity", &guard);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!guard.is_lost());
    assert!(guard.valid_for() > Duration::ZERO, "renewals moved it on");
    guard.unlock().unwrap();
}

#[test]
fn a_fixed_lease_counts_down_and_a_lost_hold_is_valid_for_nothing() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let lease = Duration::from_secs(20);
    let guard = manager.lock("fixed").leased_for(lease).lock().unwrap();
    let first = guard.valid_for();
    assert!(first <= lease, "{first:?}");
    assert_within_redis_expiry(&redis, "fixed", &guard);
    std::thread::sleep(Duration::from_millis(20));
    assert!(guard.valid_for() < first, "nothing renews a fixed lease");

    let other = manager.lock("fixed");
    assert!(other.break_lock().unwrap());
    assert!(
        eventually(PATIENCE, || guard.valid_for().is_zero()),
        "a force-released hold is still said to be valid"
    );
    assert!(matches!(
        guard.check_valid_for(Duration::ZERO),
        Err(Error::LockLost {
            reason: LostReason::ForceReleased,
            ..
        })
    ));
}

#[test]
fn a_margin_longer_than_the_hold_is_refused_and_changes_nothing() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let lock = manager.lock("margin");
    let guard = lock.lock().unwrap();
    let left = guard.check_valid_for(Duration::from_secs(1)).unwrap();
    assert!(
        left > Duration::from_secs(1) && left <= Duration::from_secs(30),
        "{left:?}"
    );
    match guard.check_valid_for(Duration::from_secs(31)) {
        Err(Error::ValidityTooShort { name, left, margin }) => {
            assert_eq!(name, "margin");
            assert!(left <= Duration::from_secs(30));
            assert_eq!(margin, Duration::from_secs(31));
        }
        other => panic!("expected ValidityTooShort, got {other:?}"),
    }
    assert!(
        lock.is_held_by_current_thread(),
        "a refused margin leaves the hold alone"
    );
    guard.unlock().unwrap();
}

#[test]
fn group_and_permit_guards_tell_their_validity() {
    let servers: Vec<_> = (0..3).map(|_| server()).collect();
    let watchdog = Duration::from_secs(5);
    let managers: Vec<_> = servers
        .iter()
        .map(|server| manager(server, watchdog))
        .collect();
    let redlock = redlease::RedLock::from_managers(&managers, "quorum").unwrap();
    let guard = redlock.lock().unwrap();
    let valid = guard.valid_for();
    assert!(valid > Duration::ZERO && valid <= watchdog, "{valid:?}");
    // Two of three members gone: the group is lost, and valid for nothing.
    for manager in &managers[..2] {
        assert!(manager.lock("quorum").break_lock().unwrap());
    }
    assert!(
        eventually(PATIENCE, || guard.valid_for().is_zero()),
        "a group with too few members left is still said to be valid"
    );
    drop(guard);

    let permits = managers[0].permit_semaphore("validity-permits");
    assert!(permits.try_set_permits(1).unwrap());
    let lease = Duration::from_secs(10);
    let permit = permits.leased_for(lease).lock().unwrap();
    let valid = permit.valid_for();
    assert!(valid > Duration::ZERO && valid <= lease, "{valid:?}");
    permit.unlock().unwrap();
}
