//! Cooperative revocation: a request reaches the holder in another process at once (flag,
//! signal and callback), never releases anything by itself, reaches every kind of holder,
//! and a waiter can ask on its own after a delay.

use crate::common;

use std::io::{BufRead, Write};
use std::time::Duration;

use common::{
    child_role, env, eventually, line_with, manager, manager_for_url, now_ns, server, spawn_child,
    wait_for_line,
};

const NAME: &str = "revocable-migration";

#[test]
fn a_request_reaches_a_holder_in_another_process_at_once_and_releases_nothing() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let lock = manager.lock(NAME);
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let mut child = spawn_child(
            "revocation::revocable_holder_process",
            "hold",
            &[("REDLEASE_TEST_URL", redis.url())],
        );
        let mut lines = wait_for_line(&mut child, "holding");
        let asked_at = now_ns();
        assert_eq!(lock.request_revocation().unwrap(), 1);
        let heard_at: u64 = line_with(&mut lines, "revocation requested at ")
            .parse()
            .unwrap();
        let flagged = line_with(&mut lines, "flag ");
        let called = line_with(&mut lines, "callback ");
        assert_eq!((flagged.as_str(), called.as_str()), ("true", "true"));
        latencies.push(Duration::from_nanos(heard_at.saturating_sub(asked_at)));

        // Nothing was released: the lock is still the child's.
        assert!(lock.is_locked().unwrap());
        assert!(lock.try_lock().unwrap().is_none());
        // Until it decides to let go.
        writeln!(child.stdin.as_mut().unwrap(), "release").unwrap();
        line_with(&mut lines, "released");
        assert!(child.wait().unwrap().success());
        assert!(!lock.is_locked().unwrap());
    }
    latencies.sort();
    println!(
        "revocation request to the holder's signal, across processes: min {:?}, median {:?}, max {:?}",
        latencies[0], latencies[2], latencies[4]
    );
    assert!(latencies[4] < Duration::from_secs(2), "{latencies:?}");
}

/// Child side of the test above: holds the lock until asked, reports when, and releases
/// only when the parent says so.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn revocable_holder_process() {
    if child_role().as_deref() != Some("hold") {
        return;
    }
    let (called, calls) = crossbeam_channel::unbounded();
    let manager = redlease::LockManager::builder(env("REDLEASE_TEST_URL"))
        .on_revocation_request(move |notice| {
            let _ = called.send(notice.clone());
        })
        .build()
        .unwrap();
    let guard = manager.lock(NAME).lock().unwrap();
    let asked = guard.revocation_signal();
    assert!(!guard.is_revocation_requested());
    println!("holding");
    asked.recv().unwrap();
    println!("revocation requested at {}", now_ns());
    println!("flag {}", guard.is_revocation_requested());
    let notice = calls.recv_timeout(Duration::from_secs(5)).unwrap();
    let ours = notice.name == NAME && notice.holder == guard.holder_id();
    println!("callback {ours}");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    assert!(!guard.is_lost(), "the request released the lock");
    guard.unlock().unwrap();
    println!("released");
}

#[test]
fn each_kind_asks_the_holders_that_keep_it_out_and_a_free_lock_has_none() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    assert_eq!(manager.lock("nobody").request_revocation().unwrap(), 0);

    let fair = manager.fair_lock("fair");
    let guard = fair.lock().unwrap();
    assert_eq!(fair.request_revocation().unwrap(), 1);
    assert!(eventually(Duration::from_secs(5), || guard.is_revocation_requested()));
    drop(guard);

    let rw = manager.read_write_lock("shared");
    let upgradable = rw.upgradable().lock().unwrap();
    let writing = upgradable.upgrade().unwrap();
    let reader = std::thread::spawn({
        let rw = rw.clone();
        move || {
            // A reader on another thread, once the writer is gone.
            let guard = rw.read().lock().unwrap();
            let asked = guard.revocation_signal();
            asked.recv_timeout(Duration::from_secs(10)).is_ok()
        }
    });
    // The upgrade's own write lock does not ask its own thread's holds.
    assert_eq!(writing.lock().request_revocation().unwrap(), 0);
    // A reader is kept out by the writer alone: only its write field is asked.
    assert_eq!(rw.read().request_revocation().unwrap(), 1);
    assert!(eventually(Duration::from_secs(5), || writing
        .is_revocation_requested()
        && upgradable.is_revocation_requested()));
    drop(writing);
    assert!(eventually(Duration::from_secs(5), || manager.stats().held == 2));
    // Readers keep out neither readers nor an upgradable reader...
    assert_eq!(rw.read().request_revocation().unwrap(), 0);
    assert_eq!(rw.upgradable().request_revocation().unwrap(), 1);
    // ... but a writer: the reader and the upgradable reader are asked.
    assert_eq!(rw.write().request_revocation().unwrap(), 2);
    assert!(reader.join().unwrap(), "the reader was not asked");
    drop(upgradable);
    assert!(manager.stats().revocations_requested >= 4);
    assert!(!guard_is_requested_after_new_chain(&manager));
}

/// A request is for the holds of the moment: a later chain of the same lock starts
/// unasked.
fn guard_is_requested_after_new_chain(manager: &redlease::LockManager) -> bool {
    let lock = manager.lock("fair-again");
    let first = lock.lock().unwrap();
    lock.request_revocation().unwrap();
    assert!(eventually(Duration::from_secs(5), || first.is_revocation_requested()));
    drop(first);
    lock.lock().unwrap().is_revocation_requested()
}

#[test]
fn a_waiter_asks_on_its_own_after_its_delay_and_gets_the_lock_once_released() {
    let redis = server();
    let holder_manager = manager(&redis, Duration::from_secs(30));
    let waiter_manager = manager_for_url(&redis.url(), Duration::from_secs(30));
    let guard = holder_manager.lock("report").lock().unwrap();
    let asked = guard.revocation_signal();

    let before_the_wait = std::time::Instant::now();
    let waiter = std::thread::spawn(move || {
        let urgent = waiter_manager
            .lock("report")
            .revoking_after(Duration::from_millis(300));
        let guard = urgent.try_lock_for(Duration::from_secs(20)).unwrap();
        guard.is_some()
    });
    asked
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter asked after its delay");
    // Not before the delay: the wait began after `before_the_wait`.
    assert!(before_the_wait.elapsed() >= Duration::from_millis(300));
    guard.unlock().unwrap();
    assert!(waiter.join().unwrap(), "the waiter got the lock");
}
