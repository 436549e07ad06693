//! Faults: Redis stopped, paused, restarted empty; a holder process killed; the pub/sub
//! connection cut.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    child_role, env, eventually, manager, manager_for_url, server, spawn_child, wait_for_line,
    CHILD_DEADLINE,
};
use redlease::{Error, LockManager};

#[test]
fn a_stopped_redis_gives_an_error_not_a_hang() {
    let mut redis = server();
    let manager = LockManager::builder(redis.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .outage_grace(Duration::from_secs(2))
        .build()
        .unwrap();
    let lock = manager.lock("down");
    redis.kill().unwrap();
    let started = Instant::now();
    // A wait without deadline rides out the outage for the grace, then says why.
    let outcome = lock.lock();
    assert!(matches!(outcome, Err(Error::Unreachable(_))), "{outcome:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(lock.is_locked().unwrap_err().is_transient());
    let outcome = redlease::LockManager::builder(redis.url()).build();
    assert!(matches!(outcome, Err(Error::Unreachable(_))), "{outcome:?}");
}

#[test]
fn a_paused_redis_times_a_wait_out_at_its_deadline() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30)); // 1 s timeouts
    let lock = manager.lock("frozen");
    assert!(!lock.is_locked().unwrap());
    redis.pause().unwrap();
    let started = Instant::now();
    // Tried through the outage until the deadline, then the error, not `Ok(None)`.
    let outcome = lock.try_lock_for(Duration::from_secs(3));
    let waited = started.elapsed();
    redis.resume().unwrap();
    assert!(matches!(outcome, Err(Error::Timeout(_))), "{outcome:?}");
    assert!(
        waited < Duration::from_secs(10),
        "bounded by the deadline and a response timeout: {waited:?}"
    );
    assert!(
        lock.try_lock().unwrap().is_some(),
        "works again once resumed"
    );
}

#[test]
fn a_restart_without_persistence_loses_the_lock_and_a_new_one_renews() {
    let mut redis = server();
    let manager = manager(&redis, Duration::from_secs(1));
    let lock = manager.lock("amnesia");
    let guard = lock.lock().unwrap();
    redis.restart().unwrap();
    assert!(
        eventually(Duration::from_secs(3), || guard.is_lost()),
        "renewal finds it gone"
    );
    assert_eq!(manager.watched_locks(), 0);
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    let fresh = lock.lock().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(!fresh.is_lost());
    assert!(lock.is_held_by_current_thread());
    assert_eq!(lock.hold_count().unwrap(), 1, "renewed across three leases");
    fresh.unlock().unwrap();
}

#[test]
fn a_killed_holder_process_frees_the_lock_within_the_watchdog_timeout() {
    let redis = server();
    let watchdog = Duration::from_secs(2);
    let mut child = spawn_child(
        "faults::holder_process",
        "hold",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let _stdout = wait_for_line(&mut child, "HELD");
    let manager = manager(&redis, watchdog);
    let lock = manager.lock("orphaned");
    assert!(lock.try_lock().unwrap().is_none(), "the child holds it");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        lock.try_lock().unwrap().is_none(),
        "kept alive past its lease while alive"
    );
    child.kill().unwrap();
    let killed_at = Instant::now();
    child.wait_within(CHILD_DEADLINE);
    let guard = lock.try_lock_for(Duration::from_secs(20)).unwrap();
    let freed_after = killed_at.elapsed();
    assert!(guard.is_some());
    assert!(
        freed_after <= watchdog + Duration::from_secs(2),
        "{freed_after:?}"
    );
}

/// Child side of the test above: hold the lock and wait to be killed.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn holder_process() {
    if child_role().as_deref() != Some("hold") {
        return;
    }
    let manager = manager_for_url(&env("REDLEASE_TEST_URL"), Duration::from_secs(2));
    let _guard = manager.lock("orphaned").lock().unwrap();
    println!("HELD");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn waiters_progress_when_the_pubsub_connection_is_cut() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let lock = manager.lock("cut");
    let guard = lock.lock().unwrap();
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.lock().unwrap().unlock().unwrap())
    };
    assert!(eventually(Duration::from_secs(5), || manager
        .subscribed_channels()
        == 1));
    let killed = redis
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .unwrap();
    assert!(killed.starts_with(":1"), "{killed}");
    // The listener reconnects and subscribes again, so the release still wakes the waiter
    // long before the 30 s lease would run out.
    assert!(eventually(Duration::from_secs(5), || redis
        .command(&["PUBSUB", "NUMSUB", "redisson_lock__channel:{cut}"])
        .unwrap()
        .ends_with(":1\r\n")));
    let released_at = Instant::now();
    guard.unlock().unwrap();
    waiter.join().unwrap();
    assert!(
        released_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        released_at.elapsed()
    );
    assert!(eventually(Duration::from_secs(5), || manager
        .subscribed_channels()
        == 0));
}
