//! `LockManager::stats` moves as a scripted workload says it must: counts exact where they
//! can be.

use crate::common;

use std::time::Duration;

use common::{eventually, manager, server};

#[test]
fn stats_follow_a_scripted_workload() {
    let redis = server();
    let manager = manager(&redis, Duration::from_millis(300));
    let other = common::manager(&redis, Duration::from_secs(30));
    assert_eq!(manager.stats(), redlease::Stats::default());

    // Ten uncontended pairs: ten acquisitions, nothing held after.
    let lock = manager.lock("counted");
    for _ in 0..10 {
        lock.lock().unwrap().unlock().unwrap();
    }
    let stats = manager.stats();
    assert_eq!((stats.acquisitions, stats.held, stats.waiting), (10, 0, 0));
    assert_eq!(stats.wait_times.count, 10);
    assert!(stats.wait_times.p50 <= stats.wait_times.p99);
    assert!(stats.wait_times.p99 <= stats.wait_times.max);

    // A hold past three renewal intervals: renewals sent in batches, none failed.
    let held = lock.lock().unwrap();
    assert_eq!(manager.stats().held, 1);
    assert!(eventually(Duration::from_secs(5), || manager
        .stats()
        .renewals_sent
        >= 3));
    let stats = manager.stats();
    assert!(stats.renewal_batches >= 3 && stats.renewal_batches <= stats.renewals_sent);
    assert_eq!(stats.renewals_failed, 0);

    // A thread waiting for it shows as waiting, then as one more acquisition.
    let waiter = std::thread::spawn({
        let lock = lock.clone();
        move || drop(lock.lock().unwrap())
    });
    assert!(eventually(Duration::from_secs(5), || manager
        .stats()
        .waiting
        == 1));
    held.unlock().unwrap();
    waiter.join().unwrap();
    let stats = manager.stats();
    assert_eq!((stats.acquisitions, stats.waiting, stats.held), (12, 0, 0));
    assert_eq!(stats.wait_times.count, 12);
    // Twelve holds ended, the long one among them; renewals took their round trips; the
    // one wait that slept is the name's.
    assert_eq!(stats.hold_times.count, 12);
    assert!(stats.hold_times.max >= Duration::from_millis(300));
    assert!(stats.renewal_times.count >= 3);
    match stats.most_waited.as_slice() {
        [waited] => assert_eq!((waited.name.as_str(), waited.waits), ("counted", 1)),
        other => panic!("{other:?}"),
    }

    // A force release, told as a loss by reason.
    let guard = lock.lock().unwrap();
    assert!(other.lock("counted").break_lock().unwrap());
    assert!(eventually(Duration::from_secs(5), || {
        manager.stats().lost_force_released == 1
    }));
    drop(guard);
    let stats = manager.stats();
    assert_eq!(
        (stats.lost_not_held_anymore, stats.lost_lease_expired),
        (0, 0)
    );

    // The pub/sub connection cut: one reconnect.
    assert_eq!(manager.stats().pubsub_reconnects, 0);
    redis
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || {
        manager.stats().pubsub_reconnects == 1
    }));

    // An observer's wait for the next change is no contention: it is not among the names
    // waited for.
    let mut observer = manager.leader_election("followed").observe().unwrap();
    let change = observer
        .next_change_for(Duration::from_millis(300))
        .unwrap();
    assert!(change.is_none());
    let names: Vec<String> = manager
        .stats()
        .most_waited
        .into_iter()
        .map(|waited| waited.name)
        .collect();
    assert_eq!(names, ["counted"]);
}
