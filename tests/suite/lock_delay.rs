//! The lock delay on real servers: a holder lost without a release (killed, or paused past
//! its lease) keeps the lock from others for the delay after its lease, while a lock without
//! one taken at the same time is free at its lease's end; a clean release frees it at once;
//! renewals keep the delay on the key; the holder's own view of its lease is unchanged.

use crate::common;

use std::io::BufReader;
use std::process::ChildStdout;
use std::time::Duration;

use common::{
    child_role, env, eventually, line_with, manager, manager_for_url, server, signal, spawn_child,
    wait_for_line, KillOnDrop, RedisServer,
};
use redlease::{Error, LockManager, RedLock};

/// The holders' watchdog timeout: renewed every second.
const WATCHDOG: Duration = Duration::from_secs(3);
/// The lock delay under test: long beside the lease, so that "still held after the lease"
/// does not depend on how fast a loaded machine runs the test.
const DELAY: Duration = Duration::from_secs(8);
const PATIENCE: Duration = Duration::from_secs(30);

/// The key's TTL left, in ms (-2 when gone).
fn pttl(redis: &RedisServer, name: &str) -> i64 {
    let reply = redis.command(&["PTTL", name]).unwrap();
    reply.trim().trim_start_matches(':').parse().unwrap()
}

#[test]
fn a_release_frees_a_delayed_lock_at_once_and_renewals_keep_the_delay_on_its_key() {
    let redis = server();
    let holder = manager(&redis, WATCHDOG);
    let other = manager(&redis, Duration::from_secs(30));
    let lock = holder.lock("printer").delayed_after_loss(DELAY);
    let guard = lock.lock().unwrap();
    // The guard trusts the lease alone.
    assert!(guard.valid_for() <= WATCHDOG);
    // Five renewals (one a second) after the acquisition: without the delay in them, the key
    // would have at most the lease (3 s) left, having run down from lease and delay (11 s).
    let renewals = holder.stats().renewals_sent;
    assert!(eventually(PATIENCE, || holder.stats().renewals_sent >= renewals + 5));
    let ttl = pttl(&redis, "printer");
    assert!(ttl > 7_000, "renewed with the delay: {ttl} ms");
    assert!(other.lock("printer").try_lock().unwrap().is_none());
    guard.unlock().unwrap();
    let taken = other.lock("printer").try_lock().unwrap();
    assert!(taken.is_some(), "a release frees it at once");
}

/// A child process that holds "plain" and "delayed" on `redis`, once it says so, and what it
/// says after.
fn delayed_holder(redis: &RedisServer) -> (KillOnDrop, BufReader<ChildStdout>) {
    let mut child = spawn_child(
        "lock_delay::delayed_holder_process",
        "delayed_holder",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let output = wait_for_line(&mut child, "HELD");
    (child, output)
}

/// A killed holder: its plain lock is free once its lease ends; its delayed lock is still
/// held then, and free only after the delay.
#[test]
fn a_killed_holders_delayed_lock_stays_held_for_the_delay_after_its_lease() {
    let redis = server();
    let (child, _output) = delayed_holder(&redis);
    signal(&child, libc::SIGKILL);
    the_delayed_lock_outlasts_the_plain_one(&redis);
}

/// A paused holder: the same, and once resumed it learns it lost both.
#[test]
fn a_paused_holders_delayed_lock_stays_held_for_the_delay_after_its_lease() {
    let redis = server();
    let (child, mut output) = delayed_holder(&redis);
    signal(&child, libc::SIGSTOP);
    the_delayed_lock_outlasts_the_plain_one(&redis);
    signal(&child, libc::SIGCONT);
    assert_eq!(line_with(&mut output, "LOST plain"), "LeaseExpired");
    let delayed = line_with(&mut output, "LOST delayed");
    // Told by its clock on waking, or by a renewal that found the key another's.
    assert!(
        delayed == "LeaseExpired" || delayed == "NotHeldAnymore",
        "{delayed}"
    );
}

/// With the holder gone silent: the plain lock is taken once its lease ends, while the
/// delayed one is still held, and the delayed one only later.
fn the_delayed_lock_outlasts_the_plain_one(redis: &RedisServer) {
    let manager = manager(redis, Duration::from_secs(30));
    let plain = manager
        .lock("plain")
        .try_lock_for(PATIENCE)
        .unwrap()
        .expect("free once the silent holder's lease ran out");
    assert!(
        manager.lock("delayed").try_lock().unwrap().is_none(),
        "still held for the delay"
    );
    assert!(pttl(redis, "delayed") > 0);
    let delayed = manager
        .lock("delayed")
        .try_lock_for(PATIENCE)
        .unwrap()
        .expect("free once the delay ran out");
    assert!(delayed.fencing_token() > 1);
    drop((plain, delayed));
}

/// Child: holds "plain" and "delayed" (with the delay) under a 3 s watchdog, says so, and
/// reports each loss.
#[test]
#[ignore = "a child process of the tests above, which run it"]
fn delayed_holder_process() {
    if child_role().as_deref() != Some("delayed_holder") {
        return;
    }
    let manager = manager_for_url(&env("REDLEASE_TEST_URL"), WATCHDOG);
    let plain = manager.lock("plain").lock().unwrap();
    let delayed = manager
        .lock("delayed")
        .delayed_after_loss(DELAY)
        .lock()
        .unwrap();
    println!("HELD");
    for (label, guard) in [("plain", &plain), ("delayed", &delayed)] {
        let reason = guard.lost_signal().recv_timeout(PATIENCE * 2);
        match reason {
            Ok(reason) => println!("LOST {label} {reason:?}"),
            Err(_) => println!("LOST {label} never"),
        }
    }
}

#[test]
fn a_lock_delay_is_refused_where_it_cannot_hold() {
    let redis = server();
    let manager: LockManager = manager(&redis, Duration::from_secs(30));
    let refused =
        |outcome: redlease::Result<bool>| matches!(outcome, Err(Error::InvalidArgument(_)));
    let fair = manager.fair_lock("fair").delayed_after_loss(DELAY);
    assert!(refused(fair.try_lock().map(|guard| guard.is_some())));
    let write = manager
        .read_write_lock("rw")
        .write()
        .delayed_after_loss(DELAY);
    assert!(refused(write.try_lock().map(|guard| guard.is_some())));
    let endless = manager
        .lock("endless")
        .delayed_after_loss(Duration::from_millis(1 << 40));
    assert!(refused(endless.try_lock().map(|guard| guard.is_some())));
    // A level taken through a handle without the delay, let go through one with an absurd
    // delay: refused, and the level still held.
    let held = manager.lock("endless").lock().unwrap();
    let absurd = manager.lock("endless").delayed_after_loss(Duration::MAX);
    assert!(refused(absurd.force_unlock().map(|()| true)));
    assert_eq!(manager.lock("endless").hold_count().unwrap(), 1);
    held.unlock().unwrap();
    let member = manager.lock("member").delayed_after_loss(DELAY);
    assert!(matches!(
        RedLock::builder([member]).build(),
        Err(Error::InvalidArgument(_))
    ));
    // The spin lock and the non-reentrant lock take one.
    for lock in [
        manager
            .spin_lock("spun", redlease::BackOff::default())
            .delayed_after_loss(DELAY),
        manager.non_reentrant_lock("once").delayed_after_loss(DELAY),
    ] {
        let guard = lock.try_lock().unwrap().expect("free");
        // The manager's lease is 30 s: more than that is the delay.
        assert!(pttl(&redis, lock.name()) > 30_000 + DELAY.as_millis() as i64 / 2);
        guard.unlock().unwrap();
    }
}

/// A chain started without a delay and re-entered through a delayed handle takes the delay:
/// its renewals keep it on the key.
#[test]
fn a_chain_keeps_the_longest_delay_of_its_levels() {
    let redis = server();
    let holder = manager(&redis, WATCHDOG);
    let outer = holder.lock("nested").lock().unwrap();
    let inner = holder
        .lock("nested")
        .delayed_after_loss(DELAY)
        .lock()
        .unwrap();
    let renewals = holder.stats().renewals_sent;
    assert!(eventually(PATIENCE, || holder.stats().renewals_sent >= renewals + 5));
    let ttl = pttl(&redis, "nested");
    assert!(ttl > 7_000, "the chain renewed with the delay: {ttl} ms");
    drop((inner, outer));
}
