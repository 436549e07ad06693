//! Losing a lock while holding it, on real faults: the holder paused past its lease, Redis
//! paused, restarted (with and without its data) or cut off, connections killed, a force
//! release from another process (heard at once, or without pub/sub at the next renewal). A
//! loss must be told promptly and with its reason; an outage the lease outlives must not be
//! told at all. Every test ends with nothing left behind.

use crate::common;

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use common::{
    assert_nothing_left, child_role, env, eventually, line_with, manager, manager_for_url,
    reporting_manager, server, signal, spawn_child, wait_for_line, RedisServer, CHILD_DEADLINE,
};
use redlease::{Error, Lock, LostReason};

/// How long the tests give a "no hang" condition.
const PATIENCE: Duration = Duration::from_secs(10);

/// Waits until a renewal lands after now: the lease first decays below 80 % of `lease`,
/// then is seen back above 85 %.
fn a_renewal_lands(lock: &Lock, lease: Duration) -> bool {
    let ttl = || lock.remaining_ttl().ok().flatten().unwrap_or_default();
    eventually(lease, || ttl() < lease * 8 / 10) && eventually(lease, || ttl() > lease * 85 / 100)
}

#[test]
fn a_holder_paused_past_its_lease_learns_it_lost_and_its_late_write_is_refused() {
    let redis = server();
    let watchdog = Duration::from_secs(3);
    let mut child = spawn_child(
        "lost_locks::paused_holder_process",
        "paused_holder",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let mut output = wait_for_line(&mut child, "READY");
    let stale_token: u64 = line_with(&mut output, "HELD").parse().unwrap();

    // Should an assertion fail below, the child (stopped or not) dies with its guard.
    signal(&child, libc::SIGSTOP);
    let manager = manager(&redis, watchdog);
    let lock = manager.lock("paused");
    let guard = lock
        .try_lock_for(PATIENCE)
        .unwrap()
        .expect("the lease of the paused holder runs out");
    assert!(guard.fencing_token() > stale_token);
    let report = manager.fenced_store("paused:report");
    report
        .set(guard.fencing_token(), "by the new holder")
        .unwrap();

    signal(&child, libc::SIGCONT);
    let resumed_at = Instant::now();
    let lost = line_with(&mut output, "LOST");
    let told_after = resumed_at.elapsed();
    eprintln!("told after {told_after:?}");
    // Told by its own clock on waking, before any renewal: a renewal would have found the
    // key another's and said `NotHeldAnymore`. (The time it took only proves no hang: a
    // loaded machine may take a second to run the woken process.)
    assert_eq!(lost, "LeaseExpired");
    assert!(told_after < PATIENCE, "told after {told_after:?}");
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"write now\n")
        .unwrap();
    assert_eq!(line_with(&mut output, "WRITE"), "refused");
    assert_eq!(line_with(&mut output, "RELEASE"), "not held");
    assert_eq!(line_with(&mut output, "LEFT"), "0 entries, 0 channels");
    assert!(child.wait_within(CHILD_DEADLINE).success());
    drop(child);

    assert_eq!(
        report.get::<String>().unwrap().as_deref(),
        Some("by the new holder")
    );
    assert!(guard.check().is_ok(), "the new holder is unaffected");
    assert!(lock.is_held_by_current_thread());
    assert_eq!(lock.hold_count().unwrap(), 1);
    guard.unlock().unwrap();
    assert_nothing_left(&manager, &redis);
}

/// Child side of the test above.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn paused_holder_process() {
    if child_role().as_deref() != Some("paused_holder") {
        return;
    }
    let manager = manager_for_url(&env("REDLEASE_TEST_URL"), Duration::from_secs(3));
    let guard = manager.lock("paused").lock().unwrap();
    let lost = guard.lost_signal();
    println!("READY");
    println!("HELD {}", guard.fencing_token());
    match lost.recv_timeout(Duration::from_secs(60)) {
        Ok(reason) => println!("LOST {reason:?}"),
        Err(_) => println!("LOST never"),
    }
    // The parent says when to go on, as if the write had been under way all along.
    std::io::stdin()
        .lock()
        .read_line(&mut String::new())
        .unwrap();
    let report = manager.fenced_store("paused:report");
    match report.set(guard.fencing_token(), "by the paused holder") {
        Err(Error::StaleToken { .. }) => println!("WRITE refused"),
        other => println!("WRITE {other:?}"),
    }
    match guard.unlock() {
        Err(Error::NotHeld { .. }) => println!("RELEASE not held"),
        other => println!("RELEASE {other:?}"),
    }
    println!(
        "LEFT {} entries, {} channels",
        manager.watched_locks(),
        manager.subscribed_channels()
    );
}

/// Holds a lock through `outage` and checks that nothing was lost: no report, renewals go
/// on, a rival cannot get in, and the release succeeds.
fn survives(mut redis: RedisServer, outage: impl FnOnce(&mut RedisServer)) {
    let watchdog = Duration::from_secs(6);
    let (manager, reports) = reporting_manager(&redis, watchdog);
    let lock = manager.lock("steady");
    let guard = lock.lock().unwrap();
    assert!(a_renewal_lands(&lock, watchdog), "renewals run");
    outage(&mut redis);
    assert!(
        a_renewal_lands(&lock, watchdog),
        "renewals resume after the outage"
    );
    let rival_manager = manager_for_url(&redis.url(), watchdog);
    let rival = rival_manager.lock("steady");
    assert!(rival
        .try_lock_for(Duration::from_millis(1500))
        .unwrap()
        .is_none());
    assert!(guard.check().is_ok(), "no false alarm");
    assert!(reports.is_empty(), "no report: {:?}", reports.try_recv());
    guard.unlock().unwrap();
    assert_nothing_left(&manager, &redis);
}

#[test]
fn a_redis_paused_for_less_than_the_lease_left_costs_nothing() {
    survives(server(), |redis| {
        redis.pause().unwrap();
        // The outage itself: at least 3.8 s of the 6 s lease are left when it starts.
        std::thread::sleep(Duration::from_millis(1500));
        redis.resume().unwrap();
    });
}

#[test]
fn a_redis_restarted_with_its_data_within_the_lease_costs_nothing() {
    let redis = RedisServer::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"])
        .expect("redis-server");
    survives(redis, |redis| {
        redis.kill().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        redis.restart().unwrap();
    });
}

#[test]
fn killed_client_connections_cost_nothing() {
    survives(server(), |redis| {
        for kind in ["normal", "pubsub"] {
            let killed = redis
                .command(&["CLIENT", "KILL", "TYPE", kind, "SKIPME", "yes"])
                .unwrap();
            assert!(!killed.starts_with(":0"), "{kind}: {killed}");
        }
    });
}

/// Cuts Redis off with `fault` while a lock is held and checks the loss is told by the
/// lease deadline, not before it could be true, and to the callback as well.
fn lost_by_the_deadline(fault: impl FnOnce(&mut RedisServer), heal: impl FnOnce(&mut RedisServer)) {
    let mut redis = server();
    let watchdog = Duration::from_secs(2);
    let (manager, reports) = reporting_manager(&redis, watchdog);
    let guard = manager.lock("cut-off").lock().unwrap();
    let lost = guard.lost_signal();
    let cut_at = Instant::now();
    fault(&mut redis);
    assert_eq!(lost.recv_timeout(PATIENCE), Ok(LostReason::LeaseExpired));
    let told_after = cut_at.elapsed();
    eprintln!("told after {told_after:?}");
    // The last renewal was sent before the cut, so its lease ends at most `watchdog` after
    // it; renewals run every third of the lease, so it ends at least about two thirds after.
    // Generous for a busy machine: the signal fires at the deadline, to the millisecond.
    assert!(
        told_after <= watchdog + Duration::from_millis(500),
        "by the deadline: {told_after:?}"
    );
    assert!(told_after >= watchdog / 2, "not early: {told_after:?}");
    assert!(guard.is_lost());
    let (report, reported_at) = reports.recv_timeout(PATIENCE).unwrap();
    assert_eq!(report.name, "cut-off");
    assert_eq!(report.reason, LostReason::LeaseExpired);
    assert!(reported_at - cut_at <= watchdog + Duration::from_millis(500));
    heal(&mut redis);
    // The loss is told on the safe side of the lease: Redis may still hold the key a few
    // milliseconds longer, and renewals sent during the outage may even land once it is over.
    // Either way the release must not fail otherwise.
    let release = guard.unlock();
    assert!(
        matches!(release, Ok(()) | Err(Error::NotHeld { .. })),
        "{release:?}"
    );
    assert_nothing_left(&manager, &redis);
}

#[test]
fn a_paused_redis_is_reported_lost_by_the_lease_deadline() {
    lost_by_the_deadline(
        |redis| redis.pause().unwrap(),
        |redis| redis.resume().unwrap(),
    );
}

#[test]
fn a_dead_redis_is_reported_lost_by_the_lease_deadline() {
    lost_by_the_deadline(
        |redis| redis.kill().unwrap(),
        |redis| redis.restart().unwrap(),
    );
}

#[test]
fn a_restart_without_persistence_is_reported_within_one_renewal_interval() {
    let mut redis = server();
    let watchdog = Duration::from_secs(6);
    let (manager, reports) = reporting_manager(&redis, watchdog);
    let guard = manager.lock("amnesia").lock().unwrap();
    let lost = guard.lost_signal();
    redis.restart().unwrap();
    let restarted_at = Instant::now();
    assert_eq!(lost.recv_timeout(PATIENCE), Ok(LostReason::NotHeldAnymore));
    let told_after = restarted_at.elapsed();
    eprintln!("told after {told_after:?}");
    assert!(
        told_after <= watchdog / 3 + Duration::from_millis(500),
        "within one renewal interval: {told_after:?}"
    );
    let (report, _) = reports.recv_timeout(PATIENCE).unwrap();
    assert_eq!(report.reason, LostReason::NotHeldAnymore);
    // The report names the guard's acquisition: its holder id and its fencing token.
    assert_eq!(report.holder, guard.holder_id());
    assert!(report.holder.starts_with(manager.client_id()));
    assert_eq!(report.fencing_token, guard.fencing_token());
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    assert_nothing_left(&manager, &redis);
}

#[test]
fn a_break_lock_from_another_process_reaches_the_holder_at_once() {
    let redis = server();
    // Renewals every 10 s: only the force-release notice can tell the holder in time.
    let (manager, reports) = reporting_manager(&redis, Duration::from_secs(30));
    let lock = manager.lock("forced");
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    let lost = inner.lost_signal();
    let fixed = manager
        .lock("forced-fixed")
        .leased_for(Duration::from_secs(60))
        .lock()
        .unwrap();
    let fixed_lost = fixed.lost_signal();
    let mut child = spawn_child(
        "lost_locks::lock_breaker_process",
        "lock_breaker",
        &[("REDLEASE_TEST_URL", redis.url())],
    );
    let mut output = wait_for_line(&mut child, "READY");
    assert_eq!(line_with(&mut output, "FREED"), "true");
    let freed_at = Instant::now();
    assert_eq!(lost.recv_timeout(PATIENCE), Ok(LostReason::ForceReleased));
    assert!(
        freed_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        freed_at.elapsed()
    );
    assert_eq!(line_with(&mut output, "FREED"), "true");
    assert_eq!(
        fixed_lost.recv_timeout(PATIENCE),
        Ok(LostReason::ForceReleased),
        "a fixed lease hears it too"
    );
    assert!(child.wait_within(CHILD_DEADLINE).success());
    assert!(outer.is_lost(), "every level of the chain is lost");
    let (report, _) = reports.recv_timeout(PATIENCE).unwrap();
    assert_eq!(
        (report.name.as_str(), report.reason),
        ("forced", LostReason::ForceReleased)
    );
    let (report, _) = reports.recv_timeout(PATIENCE).unwrap();
    assert_eq!(report.name, "forced-fixed");
    assert!(matches!(fixed.unlock(), Err(Error::NotHeld { .. })));
    assert!(matches!(inner.unlock(), Err(Error::NotHeld { .. })));
    assert!(matches!(outer.unlock(), Err(Error::NotHeld { .. })));
    // The name is free for a fresh chain, which is not lost.
    let fresh = lock.lock().unwrap();
    assert!(fresh.check().is_ok());
    fresh.unlock().unwrap();
    assert!(reports.try_recv().is_err(), "each loss told once");
    assert_nothing_left(&manager, &redis);
}

/// Child side of the test above.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn lock_breaker_process() {
    if child_role().as_deref() != Some("lock_breaker") {
        return;
    }
    let manager = manager_for_url(&env("REDLEASE_TEST_URL"), Duration::from_secs(30));
    println!("READY");
    println!("FREED {}", manager.lock("forced").break_lock().unwrap());
    println!(
        "FREED {}",
        manager.lock("forced-fixed").break_lock().unwrap()
    );
}

#[test]
fn a_notice_for_another_chain_of_the_holder_is_ignored() {
    let redis = server();
    let (manager, reports) = reporting_manager(&redis, Duration::from_secs(30));
    manager.lock("kept").lock().unwrap().unlock().unwrap();
    let guard = manager.lock("kept").lock().unwrap();
    let witness = manager.lock("witness").lock().unwrap();
    let witness_lost = witness.lost_signal();
    // A late notice naming this holder and lock, about its earlier acquisition (a lower
    // token).
    let earlier_chain = format!(
        "{} {} kept",
        guard.fencing_token() - 1,
        redis_holder_of(&redis, "kept")
    );
    let listeners = redis
        .command(&["PUBLISH", "redlease_lock__force_release", &earlier_chain])
        .unwrap();
    assert!(listeners.starts_with(":1"), "{listeners}");
    // Notices are handled in order: once the witness's is, the one before it was too.
    assert!(manager.lock("witness").break_lock().unwrap());
    assert_eq!(
        witness_lost.recv_timeout(PATIENCE),
        Ok(LostReason::ForceReleased)
    );
    assert!(guard.check().is_ok());
    assert_eq!(reports.recv_timeout(PATIENCE).unwrap().0.name, "witness");
    assert!(reports.try_recv().is_err());
    drop(witness);
    guard.unlock().unwrap();
    assert_nothing_left(&manager, &redis);
}

/// The one holder id recorded in the lock hash `name`.
fn redis_holder_of(redis: &RedisServer, name: &str) -> String {
    let reply = redis.command(&["HKEYS", name]).unwrap();
    reply
        .lines()
        .nth(2)
        .unwrap_or_else(|| panic!("no holder in {reply:?}"))
        .to_owned()
}

#[test]
fn a_deadline_is_met_while_another_lock_waits_for_a_silent_redis() {
    let redis = server();
    // A long response timeout: a renewal of the watched lock would wait 5 s for an answer.
    let manager = redlease::LockManager::builder(redis.url())
        .response_timeout(Duration::from_secs(5))
        .watchdog_timeout(Duration::from_secs(6))
        .build()
        .unwrap();
    let watched = manager.lock("watched").lock().unwrap();
    let lease = Duration::from_millis(2500);
    let fixed = manager.lock("fixed").leased_for(lease).lock().unwrap();
    let fixed_lost = fixed.lost_signal();
    let taken_at = Instant::now();
    redis.pause().unwrap();
    // The watched lock's renewal goes out at 2 s and finds no answer; the fixed lease still
    // ends on time.
    let reason = fixed_lost.recv_timeout(PATIENCE);
    let told_after = taken_at.elapsed();
    eprintln!("told after {told_after:?}");
    redis.resume().unwrap();
    assert_eq!(reason, Ok(LostReason::LeaseExpired));
    assert!(
        told_after < lease + Duration::from_millis(500),
        "{told_after:?}"
    );
    assert!(
        watched.check().is_ok(),
        "the watched lock outlives the pause"
    );
    drop(fixed);
    watched.unlock().unwrap();
    assert_nothing_left(&manager, &redis);
}

#[test]
fn without_the_notice_channel_in_its_acl_a_manager_still_works() {
    let redis = server();
    let created = redis
        .command(&[
            "ACL",
            "SETUSER",
            "worker",
            "on",
            ">secret",
            "~*",
            "resetchannels",
            "&redisson_lock__channel*",
            "+@all",
        ])
        .unwrap();
    assert!(created.starts_with("+OK"), "{created}");
    let url = format!("redis://worker:secret@127.0.0.1:{}/", redis.port());
    let started = Instant::now();
    let manager = manager_for_url(&url, Duration::from_secs(1));
    assert!(started.elapsed() < Duration::from_secs(1), "no wait for it");
    let lock = manager.lock("acl");
    // Waiting still wakes on the release channel.
    let guard = lock.lock().unwrap();
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.lock().map(|guard| guard.fencing_token()))
    };
    assert!(eventually(PATIENCE, || manager.subscribed_channels() == 1));
    let released_at = Instant::now();
    guard.unlock().unwrap();
    let token = waiter.join().unwrap().unwrap();
    assert!(released_at.elapsed() < Duration::from_secs(2));
    // A force release cannot publish its notice; the next renewal finds the loss.
    let guard = lock.lock().unwrap();
    assert!(guard.fencing_token() > token);
    let lost = guard.lost_signal();
    let other = manager_for_url(&url, Duration::from_secs(1));
    assert!(other.lock("acl").break_lock().unwrap());
    assert_eq!(lost.recv_timeout(PATIENCE), Ok(LostReason::NotHeldAnymore));
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    assert_nothing_left(&manager, &redis);
}

/// A manager built without pub/sub hears no force-release notice: a lock broken from
/// elsewhere is reported lost at the holder's next renewal, not at once, nor never.
#[test]
fn without_pubsub_a_broken_lock_is_reported_lost_at_the_next_renewal() {
    let redis = server();
    let watchdog = Duration::from_secs(3);
    let manager = redlease::LockManager::builder(redis.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(watchdog)
        .without_pubsub()
        .build()
        .unwrap();
    let guard = manager.lock("broken-quietly").lock().unwrap();
    let lost = guard.lost_signal();
    let breaker = common::manager(&redis, Duration::from_secs(30));
    assert!(breaker.lock("broken-quietly").break_lock().unwrap());
    let broken_at = Instant::now();
    let reason = lost
        .recv_timeout(PATIENCE)
        .expect("told within a renewal interval");
    let told_after = broken_at.elapsed();
    println!("told {reason:?} after {told_after:?}");
    assert_eq!(reason, LostReason::NotHeldAnymore);
    // A renewal every third of the watchdog timeout: told at the next, within one interval
    // and a response timeout.
    assert!(
        told_after < watchdog / 3 + Duration::from_secs(2),
        "{told_after:?}"
    );
    drop(guard);
    assert_nothing_left(&manager, &redis);
}
