//! The non-reentrant lock and fair lock on a real server: the holding thread's second
//! acquisition is a typed error at once (never a wait on its own lease), while other threads
//! and processes contend as for the lock; an acquisition whose answer is lost, sent again, is
//! no re-entry; and both exclude Redisson's non-reentrant clients of the same layout (its
//! own scripts, in `tests/redisson/`, run as a Java thread would).

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, manager, manager_for_url, server};
use redlease::{Error, Lock, LockManager};
use redlease_testing::CuttingProxy;

const WATCHDOG: Duration = Duration::from_secs(30);
/// How long a step may take that must only not hang.
const PATIENCE: Duration = Duration::from_secs(10);
/// A Redisson client's holder field: its client id and a Java thread id.
const JAVA: &str = "java-uuid:7";

/// Every way the holding thread may ask again, each answered [`Error::AlreadyHeld`] at once.
fn assert_every_second_acquisition_is_refused(lock: &Lock) {
    let started = Instant::now();
    let refused = |outcome: redlease::Result<bool>| matches!(outcome, Err(Error::AlreadyHeld { ref name }) if name == lock.name());
    assert!(refused(lock.lock().map(|_| true)));
    assert!(refused(lock.try_lock().map(|guard| guard.is_some())));
    assert!(refused(
        lock.try_lock_for(PATIENCE).map(|guard| guard.is_some())
    ));
    let deadline = Instant::now() + PATIENCE;
    assert!(refused(
        lock.try_lock_until(deadline).map(|guard| guard.is_some())
    ));
    assert!(refused(lock.with_lock(|_| true)));
    let leased = lock.leased_for(PATIENCE);
    assert!(refused(
        leased.try_lock_for(PATIENCE).map(|guard| guard.is_some())
    ));
    // None of them waited on the thread's own hold.
    assert!(started.elapsed() < PATIENCE);
}

fn the_holders_second_acquisition_is_refused_and_others_contend(manager: &LockManager, lock: Lock) {
    let guard = lock.lock().unwrap();
    assert_every_second_acquisition_is_refused(&lock);
    assert_eq!(lock.hold_count().unwrap(), 1, "no level was added");
    assert!(lock.is_held_by_current_thread());
    // Another thread sees it held, and waits for it as for any lock.
    let other = lock.clone();
    let waiter = std::thread::spawn(move || {
        let taken = other
            .try_lock_for(PATIENCE)
            .unwrap()
            .expect("taken once free");
        taken.unlock().unwrap();
    });
    assert!(eventually(PATIENCE, || manager.stats().waiting == 1));
    guard.unlock().unwrap();
    waiter.join().unwrap();
    // Free again: the thread takes it once more.
    let again = lock.try_lock().unwrap().expect("free");
    again.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn the_holding_threads_second_acquisition_is_a_typed_error_and_waits_for_nothing() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let lock = manager.non_reentrant_lock("migration");
    the_holders_second_acquisition_is_refused_and_others_contend(&manager, lock);
    let fair = manager.non_reentrant_fair_lock("ledger");
    the_holders_second_acquisition_is_refused_and_others_contend(&manager, fair);
    assert_eq!(manager.watched_locks(), 0);
}

/// Whether `lock` is held for another thread (one try from a thread of its own).
fn held_for_another_thread(lock: &Lock) -> bool {
    let other = lock.clone();
    let seen = std::thread::spawn(move || other.try_lock().unwrap().is_none());
    seen.join().unwrap()
}

#[test]
fn the_non_reentrant_kinds_and_their_reentrant_kinds_exclude_each_other() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let guard = manager.lock("shared").lock().unwrap();
    assert!(
        held_for_another_thread(&manager.non_reentrant_lock("shared")),
        "the lock's hold keeps the non-reentrant one out"
    );
    guard.unlock().unwrap();
    let guard = manager.non_reentrant_fair_lock("queued").lock().unwrap();
    assert!(
        held_for_another_thread(&manager.fair_lock("queued")),
        "the non-reentrant fair hold keeps the fair lock out"
    );
    guard.unlock().unwrap();
}

/// The first try's answer is lost after Redis ran it: the try is undone and the wait goes on
/// with a new chain, which the thread does not hold yet: no re-entry, and one level held.
#[test]
fn an_acquisition_whose_answer_is_lost_is_no_re_entry() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = manager_for_url(&proxy.url(), WATCHDOG);
    for (lock, name) in [
        (manager.non_reentrant_lock("cut-single"), "cut-single"),
        (manager.non_reentrant_fair_lock("cut-fair"), "cut-fair"),
    ] {
        // The scripts are loaded first, so that the cut meets the try itself.
        lock.try_lock().unwrap().expect("free").unlock().unwrap();
        proxy.cut_next(&["EVALSHA", name]);
        let guard = lock.try_lock_for(PATIENCE).unwrap().expect("taken");
        assert!(!proxy.is_armed(), "the try's answer was cut");
        assert_eq!(lock.hold_count().unwrap(), 1);
        assert!(matches!(lock.try_lock(), Err(Error::AlreadyHeld { .. })));
        guard.unlock().unwrap();
        assert!(eventually(PATIENCE, || !lock.is_locked().unwrap()));
    }
}

#[test]
fn redissons_non_reentrant_lock_and_this_one_exclude_each_other() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let lock = manager.non_reentrant_lock("interop");
    let acquire = redis::Script::new(include_str!("../redisson/non_reentrant_acquire.lua"));
    let mut java = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let java_acquire = |connection: &mut redis::Connection| {
        acquire
            .key("interop")
            .arg(30_000)
            .arg(JAVA)
            .arg("NON_REENTRANT_REACQUIRE")
            .invoke::<Option<i64>>(connection)
    };
    // The Java thread holds it: this lock waits; the Java thread's own second try is
    // Redisson's error.
    assert_eq!(
        java_acquire(&mut java).unwrap(),
        None,
        "taken by the Java thread"
    );
    assert!(lock.try_lock().unwrap().is_none());
    let again = java_acquire(&mut java).unwrap_err();
    assert!(
        again.to_string().contains("NON_REENTRANT_REACQUIRE"),
        "{again}"
    );
    let _: () = redis::cmd("DEL").arg("interop").query(&mut java).unwrap();
    // This lock holds it: the Java thread's try answers the lock's TTL.
    let guard = lock.try_lock().unwrap().expect("free");
    let ttl = java_acquire(&mut java).unwrap().expect("held: a TTL");
    assert!(ttl > 0, "{ttl}");
    guard.unlock().unwrap();
    assert_eq!(java_acquire(&mut java).unwrap(), None, "free again");
}

#[test]
fn redissons_non_reentrant_fair_lock_and_this_one_exclude_each_other() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let lock = manager.non_reentrant_fair_lock("interop-fair");
    let mut java = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let java_acquire = |connection: &mut redis::Connection| {
        common::redisson::non_reentrant_fair_acquire(connection, "interop-fair", JAVA)
    };
    // The Java thread holds it: this lock waits; the Java thread's own second try is
    // Redisson's error.
    assert_eq!(
        java_acquire(&mut java).unwrap(),
        None,
        "taken by the Java thread"
    );
    assert!(lock.try_lock().unwrap().is_none());
    let again = java_acquire(&mut java).unwrap_err();
    assert!(
        again.to_string().contains("NON_REENTRANT_REACQUIRE"),
        "{again}"
    );
    let _: () = redis::cmd("DEL")
        .arg("interop-fair")
        .query(&mut java)
        .unwrap();
    // This lock holds it: the Java thread queues behind it, and is next in line once it is
    // released; this lock then finds it held.
    let guard = lock.try_lock().unwrap().expect("free");
    assert!(
        java_acquire(&mut java).unwrap().is_some(),
        "held: the Java thread queues"
    );
    guard.unlock().unwrap();
    assert_eq!(
        java_acquire(&mut java).unwrap(),
        None,
        "taken by the Java thread"
    );
    assert!(lock.try_lock().unwrap().is_none());
}
