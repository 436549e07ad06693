//! The spin lock on a real server: the lock's layout and rules, waited for by polling. A
//! waiter subscribes to nothing, notices a release that publishes nothing (Redisson's spin
//! lock's), costs the calls its back-off allows and no more, rides out a paused and a
//! restarted server up to its deadline, is cancelled and handed the lock in the process at
//! once, and excludes the lock and Redisson's spin lock (its own script, in
//! `tests/redisson/`, run as a Java thread would) on a name.

use crate::common;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{connection, eventually, manager, server, RedisServer};
use redlease::{BackOff, CancelToken, Error, Lock, LockGuard, LockManager, RedLock};

const WATCHDOG: Duration = Duration::from_secs(30);
/// How long a step may take that must only not hang.
const PATIENCE: Duration = Duration::from_secs(20);
/// A Redisson client's holder field: its client id and a Java thread id.
const JAVA: &str = "java-uuid:7";
const MS: Duration = Duration::from_millis(1);

/// Holds `name` as a Java thread of Redisson's spin lock does, for `lease_ms`: answers
/// whether it took it (else the lock's TTL stood in the way).
fn java_spin_acquire(connection: &mut redis::Connection, name: &str, lease_ms: u64) -> bool {
    let acquire = redis::Script::new(include_str!("../redisson/spin_acquire.lua"));
    let ttl: Option<i64> = acquire
        .key(name)
        .arg(lease_ms)
        .arg(JAVA)
        .invoke(connection)
        .unwrap();
    ttl.is_none()
}

/// Releases `name` as Redisson's spin lock releases its last level: the hash deleted, and no
/// message published.
fn java_spin_release(connection: &mut redis::Connection, name: &str) {
    let _: () = redis::cmd("DEL").arg(name).query(connection).unwrap();
}

/// The scripts the server has run so far (`EVAL` and `EVALSHA` calls).
fn script_calls(connection: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(connection)
        .unwrap();
    info.lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A thread of its own that waits for `lock` up to `wait`, and answers whether it took it
/// (released at once) and when it returned.
fn waiter(lock: &Lock, wait: Duration) -> JoinHandle<(redlease::Result<bool>, Instant)> {
    let lock = lock.clone();
    std::thread::spawn(move || {
        let taken = lock.try_lock_for(wait).map(|guard| guard.is_some());
        (taken, Instant::now())
    })
}

/// Waits until `count` threads of `manager` wait.
fn until_waiting(manager: &LockManager, count: usize) {
    assert!(
        eventually(PATIENCE, || manager.stats().waiting == count),
        "{} waiting, not {count}",
        manager.stats().waiting
    );
}

#[test]
fn a_spin_lock_is_the_lock_in_redis_and_excludes_it_both_ways() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let other = common::manager(&redis, WATCHDOG);
    let spin = manager.spin_lock("shared", BackOff::default());
    let outer = spin.lock().unwrap();
    let inner = spin.lock().unwrap();
    assert_eq!(spin.hold_count().unwrap(), 2, "reentrant");
    assert!(inner.fencing_token() >= outer.fencing_token());
    assert!(other.lock("shared").try_lock().unwrap().is_none());
    assert_eq!(manager.watched_locks(), 1, "kept by the watchdog");
    drop(inner);
    let first_token = outer.fencing_token();
    outer.unlock().unwrap();
    // The lock holds it: the spin lock waits, and the lock's release publishes as ever.
    let held = other.lock("shared").lock().unwrap();
    assert!(held.fencing_token() > first_token, "one token counter");
    assert!(spin.try_lock().unwrap().is_none());
    held.unlock().unwrap();
    // The spin lock holds it: the lock's waiter, subscribed, is woken by the spin lock's
    // release, long before the 30 s lease would have run out.
    let spin_guard = spin.lock().unwrap();
    let lock_waiter = waiter(&other.lock("shared"), PATIENCE);
    until_waiting(&other, 1);
    assert!(eventually(PATIENCE, || other.subscribed_channels() == 1));
    let released_at = Instant::now();
    spin_guard.unlock().unwrap();
    let (taken, at) = lock_waiter.join().unwrap();
    assert!(taken.unwrap());
    let woken_after = at - released_at;
    assert!(woken_after < Duration::from_secs(5), "{woken_after:?}");
}

#[test]
fn redissons_spin_lock_and_this_one_exclude_each_other() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let spin = manager.spin_lock("interop-spin", BackOff::default());
    let mut java = connection(&redis);
    assert!(java_spin_acquire(&mut java, "interop-spin", 30_000));
    assert!(spin.try_lock().unwrap().is_none());
    java_spin_release(&mut java, "interop-spin");
    let guard = spin.try_lock().unwrap().expect("free");
    assert!(!java_spin_acquire(&mut java, "interop-spin", 30_000));
    guard.unlock().unwrap();
    assert!(
        java_spin_acquire(&mut java, "interop-spin", 30_000),
        "free again"
    );
}

/// Many names waited for at once cost no subscription; each waiter notices a release that
/// publishes nothing at its next try.
#[test]
fn spin_waiters_subscribe_to_nothing_and_notice_a_silent_release() {
    const NAMES: usize = 20;
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let mut java = connection(&redis);
    let back_off = BackOff::exponential(MS, 50 * MS).unwrap();
    let mut waiters = Vec::new();
    for index in 0..NAMES {
        let name = format!("many:{index}");
        assert!(java_spin_acquire(&mut java, &name, 60_000));
        waiters.push(waiter(&manager.spin_lock(&name, back_off), PATIENCE));
    }
    until_waiting(&manager, NAMES);
    assert_eq!(manager.subscribed_channels(), 0);
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query(&mut java)
        .unwrap();
    // At most the manager's own notice channel (one, whatever it holds or waits for), no
    // lock's.
    assert!(
        channels
            .iter()
            .all(|channel| !channel.starts_with("redisson_lock")),
        "{channels:?}"
    );
    let released_at = Instant::now();
    for index in 0..NAMES {
        java_spin_release(&mut java, &format!("many:{index}"));
    }
    for waiter in waiters {
        let (taken, at) = waiter.join().unwrap();
        assert!(taken.unwrap(), "taken after the silent release");
        // Lock leases had a minute left: only a try noticed the release this soon.
        assert!(at - released_at < Duration::from_secs(10));
    }
}

/// The calls a waiter costs: its back-off's, measured on the server while the lock is held
/// by a Java thread (no renewal, no other caller).
#[test]
fn a_spin_waiter_costs_the_calls_its_back_off_allows() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let mut java = connection(&redis);
    assert!(java_spin_acquire(&mut java, "polled", 60_000));
    // The scripts are loaded first, so that only tries are counted.
    let spin = manager.spin_lock("polled", BackOff::default());
    assert!(spin.try_lock().unwrap().is_none());
    for (back_off, wait) in [
        (BackOff::default(), Duration::from_secs(2)),
        (BackOff::constant(100 * MS).unwrap(), Duration::from_secs(2)),
    ] {
        let spin = manager.spin_lock("polled", back_off);
        let before = script_calls(&mut java);
        let started = Instant::now();
        assert!(spin.try_lock_for(wait).unwrap().is_none());
        let waited = started.elapsed();
        let calls = script_calls(&mut java) - before;
        // Each pause is at least half its step; steps double up to the longest. Two tries
        // come without a pause (the first, and the one after the wait joined its line).
        let mut bound = 2;
        let mut slept = Duration::ZERO;
        let mut step = back_off.initial_delay();
        while slept < waited {
            bound += 1;
            slept += step / 2;
            step = (step * 2).min(back_off.max_delay());
        }
        let per_second = calls as f64 / waited.as_secs_f64();
        println!("{back_off:?}: {calls} tries in {waited:?} ({per_second:.1}/s), at most {bound}");
        assert!(calls <= bound, "{calls} tries, at most {bound}");
        assert!(calls >= 5, "{calls} tries: it polled");
    }
    // A waiter that listens instead tries twice (or polls every 100 ms while its subscription
    // is not confirmed): for the record.
    let lock = manager.lock("polled");
    let before = script_calls(&mut java);
    assert!(lock.try_lock_for(Duration::from_secs(2)).unwrap().is_none());
    println!(
        "the lock's waiter: {} tries",
        script_calls(&mut java) - before
    );
}

/// A spin waiter (polling every 10-20 ms) of a manager of `redis`, waiting for `name`, which a
/// Java thread holds for a minute: the manager, the Java thread's connection, and the waiter.
type SpinWaiter = (
    LockManager,
    redis::Connection,
    JoinHandle<(redlease::Result<bool>, Instant)>,
);

fn spin_waiter_on_java_hold(redis: &RedisServer, name: &str) -> SpinWaiter {
    let manager = manager(redis, WATCHDOG);
    let mut java = connection(redis);
    assert!(java_spin_acquire(&mut java, name, 60_000));
    let spin = manager.spin_lock(name, BackOff::constant(20 * MS).unwrap());
    let waiting = waiter(&spin, PATIENCE);
    until_waiting(&manager, 1);
    (manager, java, waiting)
}

#[test]
fn a_spin_waiter_rides_out_a_paused_server_and_takes_the_lock_after() {
    let redis = server();
    let (_manager, mut java, waiting) = spin_waiter_on_java_hold(&redis, "paused");
    redis.pause().unwrap();
    // Longer than the manager's response timeout and outage grace (1 s each).
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!waiting.is_finished(), "the wait ended in the pause");
    redis.resume().unwrap();
    java_spin_release(&mut java, "paused");
    let (taken, _) = waiting.join().unwrap();
    assert!(taken.unwrap(), "taken once the server was back");
}

#[test]
fn a_spin_waiter_rides_out_a_restarted_server_up_to_its_deadline() {
    let mut redis = server();
    let (_manager, _java, waiting) = spin_waiter_on_java_hold(&redis, "restarted");
    redis.kill().unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!waiting.is_finished(), "the wait ended in the outage");
    // It comes back empty: the Java thread's hold is gone with it.
    redis.restart().unwrap();
    let (taken, _) = waiting.join().unwrap();
    assert!(taken.unwrap(), "taken once the server was back");
}

/// A cancel wakes a waiter in its pause, and a deadline ends one: neither waits out a long
/// back-off.
#[test]
fn a_cancel_or_a_deadline_ends_a_spin_waiters_pause() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let mut java = connection(&redis);
    assert!(java_spin_acquire(&mut java, "slow-poll", 60_000));
    let slow = BackOff::constant(Duration::from_secs(30)).unwrap();
    let token = CancelToken::new();
    let spin = manager.spin_lock("slow-poll", slow);
    let waiting = waiter(&spin.cancellable_by(&token), PATIENCE);
    until_waiting(&manager, 1);
    let cancelled_at = Instant::now();
    token.cancel();
    let (outcome, at) = waiting.join().unwrap();
    assert!(matches!(outcome, Err(Error::Cancelled)), "{outcome:?}");
    assert!(
        at - cancelled_at < Duration::from_secs(5),
        "{:?}",
        at - cancelled_at
    );
    let started = Instant::now();
    assert!(spin
        .try_lock_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A release of the process hands the lock to its waiting thread at once, whose back-off
/// would have made it wait 15 s or more.
#[test]
fn a_release_in_the_process_hands_the_spin_lock_to_its_waiter_at_once() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let slow = BackOff::constant(Duration::from_secs(30)).unwrap();
    let spin = manager.spin_lock("in-process", slow);
    let held: LockGuard = spin.lock().unwrap();
    let waiting = waiter(&spin, Duration::from_secs(60));
    // Counted as waiting once it sleeps, after it joined the line.
    until_waiting(&manager, 1);
    let released_at = Instant::now();
    held.unlock().unwrap();
    let (taken, at) = waiting.join().unwrap();
    assert!(taken.unwrap());
    let after = at - released_at;
    assert!(after < Duration::from_secs(10), "{after:?}");
    assert_eq!(manager.stats().handoffs, 1);
}

#[test]
fn a_spin_lock_is_no_member_of_a_group_lock() {
    let redis = server();
    let manager = manager(&redis, WATCHDOG);
    let spin = manager.spin_lock("grouped", BackOff::default());
    let refused = RedLock::builder([spin]).build();
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
}
