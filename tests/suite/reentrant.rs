//! The reentrant lock on one healthy Redis: counts, ownership, leases, inspection, bad input.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, manager, server};
use redlease::{Error, LostReason};

const WATCHDOG: Duration = Duration::from_secs(30);

#[test]
fn reentrancy_counts_go_up_and_down() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let lock = manager.lock("reentrant");
    assert_eq!(lock.hold_count().unwrap(), 0);
    let outer = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    let inner = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    inner.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(lock.is_locked().unwrap());
    drop(outer);
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert!(!lock.is_locked().unwrap());
    assert_eq!(manager.watched_locks(), 0);
}

#[test]
fn the_data_layout_is_redissons() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let lock = manager.lock("layout");
    let guard = lock.lock().unwrap();
    let fields = redis.command(&["HGETALL", "layout"]).unwrap();
    assert!(fields.contains(manager.client_id()), "{fields}");
    assert!(fields.ends_with("$1\r\n1\r\n"), "count 1: {fields}");
    let token = redis
        .command(&["GET", "redisson_lock_token:{layout}"])
        .unwrap();
    assert!(
        token.ends_with(&format!("{}\r\n", guard.fencing_token())),
        "{token}"
    );
    drop(guard);
    // A Redisson holder (any other holder id) excludes us, and we wait for its release message.
    redis
        .command(&["HSET", "layout", "java-client-uuid:1", "1"])
        .unwrap();
    redis.command(&["PEXPIRE", "layout", "60000"]).unwrap();
    assert!(lock.try_lock().unwrap().is_none());
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let guard = lock.lock().unwrap();
            drop(guard);
            started.elapsed()
        })
    };
    assert!(eventually(Duration::from_secs(5), || redis
        .command(&["PUBSUB", "NUMSUB", "redisson_lock__channel:{layout}"])
        .unwrap()
        .ends_with(":1\r\n")));
    redis.command(&["DEL", "layout"]).unwrap();
    redis
        .command(&["PUBLISH", "redisson_lock__channel:{layout}", "0"])
        .unwrap();
    let waited = waiter.join().unwrap();
    assert!(
        waited < Duration::from_secs(30),
        "woken by the message, not the PTTL: {waited:?}"
    );
}

#[test]
fn another_thread_cannot_release_what_it_does_not_hold() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let lock = manager.lock("owned");
    let guard = lock.lock().unwrap();
    let other = lock.clone();
    let outcome = std::thread::spawn(move || other.force_unlock())
        .join()
        .unwrap();
    assert!(
        matches!(outcome, Err(Error::NotHeld { ref name }) if name == "owned"),
        "{outcome:?}"
    );
    assert!(lock.is_locked().unwrap());
    assert!(lock.is_held_by_current_thread());
    assert_eq!(lock.hold_count().unwrap(), 1);
    let other = lock.clone();
    let held_there = std::thread::spawn(move || other.is_held_by_current_thread())
        .join()
        .unwrap();
    assert!(!held_there);
    guard.unlock().unwrap();
}

#[test]
fn a_leaked_guard_is_released_through_the_handle() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let lock = manager.lock("leaked");
    std::mem::forget(lock.lock().unwrap());
    assert_eq!(manager.watched_locks(), 1);
    lock.force_unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
    assert_eq!(manager.watched_locks(), 0);
    assert!(matches!(lock.force_unlock(), Err(Error::NotHeld { .. })));
}

#[test]
fn break_lock_frees_a_lock_held_elsewhere() {
    let redis = server();
    let holder = manager(&redis, WATCHDOG);
    let other = manager(&redis, WATCHDOG);
    let lock = holder.lock("forced");
    let guard = lock.lock().unwrap();
    let foreign = other.lock("forced");
    assert!(foreign.try_lock().unwrap().is_none());
    assert!(foreign.break_lock().unwrap());
    assert!(!foreign.break_lock().unwrap(), "nothing left to free");
    let taken = foreign.try_lock().unwrap().expect("free after break_lock");
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    taken.unlock().unwrap();
}

#[test]
fn a_fixed_lease_hands_the_lock_over_when_it_runs_out() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let lock = manager.lock("fixed");
    let lease = Duration::from_millis(800);
    let taken_at = Instant::now();
    let stale = lock.leased_for(lease).lock().unwrap();
    let lost = stale.lost_signal();
    assert_eq!(
        manager.watched_locks(),
        1,
        "a fixed lease is watched until it runs out"
    );
    let other = lock.clone();
    let handed_over_after = std::thread::spawn(move || {
        let guard = other
            .try_lock_for(Duration::from_secs(10))
            .unwrap()
            .expect("handed over");
        let after = taken_at.elapsed();
        guard.unlock().unwrap();
        after
    })
    .join()
    .unwrap();
    assert!(
        handed_over_after >= lease,
        "no early expiry: {handed_over_after:?}"
    );
    assert!(
        handed_over_after < Duration::from_secs(5),
        "{handed_over_after:?}"
    );
    assert!(stale.is_lost(), "a fixed lease past its end reports lost");
    assert_eq!(
        lost.recv_timeout(Duration::from_secs(5)),
        Ok(LostReason::LeaseExpired),
        "and signals it"
    );
    assert_eq!(manager.watched_locks(), 0);
    assert!(matches!(stale.check(), Err(Error::LockLost { .. })));
    assert!(
        matches!(stale.unlock(), Err(Error::NotHeld { .. })),
        "stale release"
    );
}

#[test]
fn remaining_ttl_follows_the_lease() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(20));
    let lock = manager.lock("ttl");
    assert_eq!(lock.remaining_ttl().unwrap(), None);
    let guard = lock.leased_for(Duration::from_secs(5)).lock().unwrap();
    let left = lock.remaining_ttl().unwrap().unwrap();
    assert!(
        left > Duration::from_secs(3) && left <= Duration::from_secs(5),
        "{left:?}"
    );
    drop(guard);
    let guard = lock.lock().unwrap();
    let left = lock.remaining_ttl().unwrap().unwrap();
    assert!(
        left > Duration::from_secs(15) && left <= Duration::from_secs(20),
        "{left:?}"
    );
    drop(guard);
    assert_eq!(lock.remaining_ttl().unwrap(), None);
    redis.command(&["HSET", "ttl", "someone", "1"]).unwrap();
    assert_eq!(lock.remaining_ttl().unwrap(), Some(Duration::MAX));
}

#[test]
fn try_lock_for_gives_up_after_its_wait() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let lock = manager.lock("busy");
    let _guard = lock.lock().unwrap();
    let other = lock.clone();
    let (acquired, waited) = std::thread::spawn(move || {
        let started = Instant::now();
        let acquired = other
            .try_lock_for(Duration::from_secs(3))
            .unwrap()
            .is_some();
        (acquired, started.elapsed())
    })
    .join()
    .unwrap();
    assert!(!acquired);
    assert!(waited >= Duration::from_secs(3), "{waited:?}");
    assert!(waited < Duration::from_secs(6), "{waited:?}");
    let other = lock.clone();
    let immediate = std::thread::spawn(move || other.try_lock().unwrap().is_none())
        .join()
        .unwrap();
    assert!(immediate);
    assert!(eventually(Duration::from_secs(5), || manager
        .subscribed_channels()
        == 0));
}

#[test]
fn bad_input_gets_typed_errors() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let nameless = manager.lock("");
    assert!(matches!(nameless.lock(), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        nameless.is_locked(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        nameless.break_lock(),
        Err(Error::InvalidArgument(_))
    ));
    let lock = manager.lock("inputs");
    assert!(matches!(
        lock.leased_for(Duration::ZERO).lock(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        lock.leased_for(Duration::MAX).lock(),
        Err(Error::InvalidArgument(_))
    ));
    // Too short to be held: no grant would arrive before it ran out, and the wait would
    // never end.
    for lease in [Duration::from_nanos(1), Duration::from_millis(9)] {
        assert!(
            matches!(
                lock.leased_for(lease).lock(),
                Err(Error::InvalidArgument(_))
            ),
            "{lease:?}"
        );
    }
    match lock.try_lock_for(Duration::MAX) {
        Err(Error::InvalidArgument(message)) => {
            assert!(
                message.contains("try_lock_for"),
                "the error names the call: {message}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        lock.leased_for(Duration::ZERO)
            .try_lock_for(Duration::from_secs(1)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(
        lock.try_lock_for(Duration::ZERO).unwrap().is_some(),
        "zero wait tries once"
    );
    for builder in [
        redlease::LockManager::builder(redis.url()).watchdog_timeout(Duration::ZERO),
        redlease::LockManager::builder(redis.url()).watchdog_timeout(Duration::from_millis(5)),
        redlease::LockManager::builder(redis.url()).response_timeout(Duration::ZERO),
        redlease::LockManager::builder(redis.url()).connect_timeout(Duration::MAX),
        redlease::LockManager::builder("not a url"),
        // Refused with or without the `tls` feature: skipping the certificate checks takes
        // the builder's own option, and without the feature there is no TLS at all.
        redlease::LockManager::builder("rediss://127.0.0.1:1/#insecure"),
    ] {
        let outcome = builder.build();
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{outcome:?}"
        );
    }
    redis.command(&["SET", "a-string", "x"]).unwrap();
    let outcome = manager.lock("a-string").try_lock();
    assert!(
        matches!(outcome, Err(Error::Redis(_))),
        "WRONGTYPE: {outcome:?}"
    );
}

#[test]
fn names_may_hold_braces_spaces_and_unicode() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    for name in ["{orders}:17", "with space", "zählwerk ✓", "a}b{c", ":"] {
        let lock = manager.lock(name);
        let guard = lock.lock().unwrap();
        assert!(lock.is_locked().unwrap(), "{name}");
        let other = lock.clone();
        let waiter = std::thread::spawn(move || {
            other
                .try_lock_for(Duration::from_secs(10))
                .map(|g| g.is_some())
        });
        assert!(eventually(Duration::from_secs(5), || manager
            .subscribed_channels()
            == 1));
        guard.unlock().unwrap();
        assert!(
            waiter.join().unwrap().unwrap(),
            "{name}: woken by the release"
        );
        assert!(!lock.is_locked().unwrap(), "{name}");
    }
}

#[test]
fn shutdown_stops_new_acquisitions_but_lets_guards_release() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let lock = manager.lock("closing");
    let guard = lock.lock().unwrap();
    manager.shutdown();
    manager.shutdown();
    assert!(matches!(lock.try_lock(), Err(Error::ShutDown)));
    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn a_reentrant_level_never_shortens_the_lease_of_the_outer_one() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(20));
    let lock = manager.lock("nested-leases");
    let outer = lock.lock().unwrap();
    let inner = lock.leased_for(Duration::from_millis(100)).lock().unwrap();
    let left = lock.remaining_ttl().unwrap().unwrap();
    assert!(
        left > Duration::from_secs(15),
        "inner level shortened the lease to {left:?}"
    );
    inner.unlock().unwrap();
    let left = lock.remaining_ttl().unwrap().unwrap();
    assert!(
        left > Duration::from_secs(15),
        "inner release shortened the lease to {left:?}"
    );
    outer.unlock().unwrap();
}

#[test]
fn a_failing_acquisition_writes_nothing() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    redis
        .command(&["SET", "redisson_lock_token:{spoiled}", "not-a-number"])
        .unwrap();
    let lock = manager.lock("spoiled");
    assert!(matches!(lock.try_lock(), Err(Error::Redis(_))));
    assert!(
        !lock.is_locked().unwrap(),
        "no half-taken lock is left behind"
    );
    assert_eq!(manager.watched_locks(), 0);
}
