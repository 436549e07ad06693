//! The permit-expirable semaphore on a real server: a killed holder's permit comes back
//! within its lease, a guarded permit outlives its lease while its guard lives, losses are
//! told, a hand-written client of the documented layout interoperates, bad input is a typed
//! error, and nothing is left behind.

use crate::common;
use crate::common::semaphores;

use std::time::{Duration, Instant};

use common::{
    child_role, env, eventually, line_with, manager, manager_for_url, server, signal, spawn_child,
    wait_for_line,
};
use redlease::{Error, LostReason};
use semaphores::{assert_left_nothing, channel, connection, timeouts_key};

/// The watchdog timeout of the tests that watch leases: a guarded permit's lease.
const SHORT_WATCHDOG: Duration = Duration::from_secs(1);
/// A watchdog so long that its fallback look (a third of it) cannot pass for a wake-up.
const LONG_WATCHDOG: Duration = Duration::from_secs(30);
/// How long the tests give a "no hang" condition.
const PATIENCE: Duration = Duration::from_secs(10);
/// The fixed lease of the killed holder's permit.
const FIXED_LEASE: Duration = Duration::from_millis(1500);

/// Kills a child holding the only permit of `name` (taken as `role` says) and answers how
/// long after the kill a waiter got the permit.
fn permit_back_after_kill(role: &str, name: &str) -> Duration {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let semaphore = manager.permit_semaphore(name);
    assert!(semaphore.try_set_permits(1).unwrap());
    let mut child = spawn_child(
        "permit_semaphore::holder_process",
        role,
        &[
            ("REDLEASE_TEST_URL", redis.url()),
            ("REDLEASE_TEST_NAME", name.to_owned()),
        ],
    );
    let mut output = wait_for_line(&mut child, "READY");
    let id = line_with(&mut output, "HELD");
    assert_eq!(id.len(), 32, "{id}");
    assert!(semaphore.try_lock().unwrap().is_none());
    signal(&child, libc::SIGKILL);
    let killed_at = Instant::now();
    let guard = semaphore
        .try_lock_for(PATIENCE)
        .unwrap()
        .expect("the killed holder's permit comes back");
    let back_after = killed_at.elapsed();
    eprintln!("{role}: permit back {back_after:?} after the kill");
    assert_ne!(guard.permit_id(), id);
    guard.unlock().unwrap();
    // The dead holder's permit was given back by the server, not by this release.
    assert!(matches!(
        semaphore.release_id(&id),
        Err(Error::NotHeld { .. })
    ));
    assert_eq!(semaphore.available_permits().unwrap(), 1);
    assert_left_nothing(&manager, &redis, name);
    back_after
}

#[test]
fn a_killed_holders_guarded_permit_comes_back_within_its_lease() {
    let back_after = permit_back_after_kill("guarded", "killed-guarded");
    // Its last renewal was at most one lease before the kill.
    assert!(
        back_after <= SHORT_WATCHDOG + Duration::from_millis(500),
        "{back_after:?}"
    );
}

#[test]
fn a_killed_holders_fixed_lease_permit_comes_back_within_its_lease() {
    let back_after = permit_back_after_kill("fixed", "killed-fixed");
    assert!(
        back_after <= FIXED_LEASE + Duration::from_millis(500),
        "{back_after:?}"
    );
}

/// Child side of the tests above: takes the permit as its role says, tells its id and
/// waits to be killed.
#[test]
#[ignore = "a child process of the tests above, which run it"]
fn holder_process() {
    let Some(role) = child_role() else {
        return;
    };
    let manager = manager_for_url(&env("REDLEASE_TEST_URL"), SHORT_WATCHDOG);
    let semaphore = manager.permit_semaphore(&env("REDLEASE_TEST_NAME"));
    let guard = match role.as_str() {
        "guarded" => semaphore.lock().unwrap(),
        "fixed" => semaphore.leased_for(FIXED_LEASE).lock().unwrap(),
        _ => return,
    };
    println!("READY");
    println!("HELD {}", guard.permit_id());
    // Until killed; the parent's stdin never closes before then.
    std::io::stdin().read_line(&mut String::new()).unwrap();
}

#[test]
fn a_guarded_permit_outlives_its_lease_while_its_guard_lives_and_returns_on_drop() {
    let redis = server();
    let manager = manager(&redis, SHORT_WATCHDOG);
    let rival_manager = manager_for(&redis);
    let semaphore = manager.permit_semaphore("kept");
    assert!(semaphore.try_set_permits(1).unwrap());
    let guard = semaphore.lock().unwrap();
    let lost = guard.lost_signal();
    assert_eq!(manager.watched_locks(), 1);
    // Three leases long, a rival gets nothing: the watchdog renews the permit.
    let rival = rival_manager.permit_semaphore("kept");
    assert!(rival.try_lock_for(SHORT_WATCHDOG * 3).unwrap().is_none());
    assert!(guard.check().is_ok());
    assert!(lost.is_empty());
    assert_eq!(semaphore.available_permits().unwrap(), 0);
    drop(guard);
    assert_eq!(manager.watched_locks(), 0);
    assert_eq!(rival.available_permits().unwrap(), 1);
    assert!(rival.try_lock().unwrap().is_some());
    assert_left_nothing(&manager, &redis, "kept");
    assert_left_nothing(&rival_manager, &redis, "kept");
}

/// A manager whose watchdog cannot pass for a renewal of another's permit.
fn manager_for(redis: &common::RedisServer) -> redlease::LockManager {
    manager(redis, LONG_WATCHDOG)
}

#[test]
fn a_fixed_lease_permit_is_told_lost_when_its_lease_ends() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let semaphore = manager.permit_semaphore("brief");
    assert!(semaphore.try_set_permits(1).unwrap());
    let lease = Duration::from_millis(400);
    let taken_at = Instant::now();
    let guard = semaphore
        .leased_for(lease)
        .try_lock_for(Duration::ZERO)
        .unwrap()
        .unwrap();
    let lost = guard.lost_signal();
    assert_eq!(lost.recv_timeout(PATIENCE), Ok(LostReason::LeaseExpired));
    assert!(taken_at.elapsed() <= lease + Duration::from_millis(300));
    assert!(guard.is_lost());
    assert!(matches!(guard.check(), Err(Error::LockLost { .. })));
    // The server gives the permit back by itself.
    assert!(eventually(PATIENCE, || semaphore
        .available_permits()
        .unwrap()
        == 1));
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    assert_eq!(
        semaphore.available_permits().unwrap(),
        1,
        "not given back twice"
    );
    assert_left_nothing(&manager, &redis, "brief");
}

#[test]
fn a_permit_released_by_id_elsewhere_is_told_lost_to_its_guard() {
    let redis = server();
    let manager = manager(&redis, SHORT_WATCHDOG);
    let other_manager = manager_for(&redis);
    let semaphore = manager.permit_semaphore("handed");
    semaphore.add_permits(2).unwrap();
    let guard = semaphore.lock().unwrap();
    let kept = semaphore.lock().unwrap();
    let lost = guard.lost_signal();
    other_manager
        .permit_semaphore("handed")
        .release_id(guard.permit_id())
        .unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 1);
    // Found at the next renewal, a third of the watchdog timeout later at most.
    assert_eq!(lost.recv_timeout(PATIENCE), Ok(LostReason::NotHeldAnymore));
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    assert!(kept.check().is_ok(), "the other permit is unaffected");
    kept.unlock().unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 2);
    assert_left_nothing(&manager, &redis, "handed");
}

/// A hand-written client of the documented layout: gives back expired permits, then takes one
/// under the id ARGV[1] with a lease of ARGV[2] ms by the server's clock; answers 1 or 0.
const HAND_TAKE: &str = "local t = redis.call('time') \
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
    local expired = redis.call('zrangebyscore', KEYS[3], 0, now) \
    if #expired > 0 then redis.call('zrem', KEYS[3], unpack(expired)) \
      redis.call('publish', KEYS[2], redis.call('incrby', KEYS[1], #expired)) end \
    if tonumber(redis.call('get', KEYS[1]) or '0') < 1 then return 0 end \
    redis.call('decrby', KEYS[1], 1) \
    redis.call('zadd', KEYS[3], now + tonumber(ARGV[2]), ARGV[1]) return 1";
/// ... and gives its permit back, announcing the new count.
const HAND_RELEASE: &str = "if redis.call('zrem', KEYS[3], ARGV[1]) == 0 then return 0 end \
    redis.call('publish', KEYS[2], redis.call('incrby', KEYS[1], 1)) return 1";

#[test]
fn a_hand_written_client_of_the_layout_excludes_and_wakes_and_is_excluded_and_woken() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let semaphore = manager.permit_semaphore("mixed");
    let (take, give) = (
        redis::Script::new(HAND_TAKE),
        redis::Script::new(HAND_RELEASE),
    );
    let hand_id = [7u8; 16];
    let keys = ["mixed".to_owned(), channel("mixed"), timeouts_key("mixed")];
    let mut plain = connection(&redis);
    let mut hand_take = |lease_ms: u64| -> bool {
        let taken: u32 = take
            .key(&keys[..])
            .arg(&hand_id[..])
            .arg(lease_ms)
            .invoke(&mut plain)
            .unwrap();
        taken == 1
    };
    assert!(semaphore.try_set_permits(1).unwrap());

    // The library's permit: 16 raw bytes in the zset, the lease by the server's clock.
    let guard = semaphore.lock().unwrap();
    let mut plain_too = connection(&redis);
    let (time, _): (u64, u64) = redis::cmd("TIME").query(&mut plain_too).unwrap();
    let taken: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
        .arg(timeouts_key("mixed"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut plain_too)
        .unwrap();
    assert_eq!(taken.len(), 1);
    let hex: String = taken[0]
        .0
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(hex, guard.permit_id());
    let expires_in = taken[0].1 - (time * 1000) as f64;
    assert!(
        (20_000.0..=31_000.0).contains(&expires_in),
        "the watchdog lease from now: {expires_in} ms"
    );
    // It excludes the hand-written client...
    assert!(!hand_take(60_000));
    // ... whose waiting ends with the announcement of the release.
    let mut listener = connection(&redis);
    let mut subscribed = listener.as_pubsub();
    subscribed.subscribe(channel("mixed")).unwrap();
    subscribed.set_read_timeout(Some(PATIENCE)).unwrap();
    guard.unlock().unwrap();
    assert_eq!(
        subscribed
            .get_message()
            .unwrap()
            .get_payload::<String>()
            .unwrap(),
        "1"
    );
    drop(subscribed);

    // The hand-written client's permit excludes the library...
    assert!(hand_take(60_000));
    assert!(semaphore.try_lock().unwrap().is_none());
    // ... and its release wakes the library's waiter.
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let got = semaphore.try_lock_for(PATIENCE).unwrap();
            (got.map(|guard| guard.unlock()), Instant::now())
        });
        assert!(eventually(PATIENCE, || manager.subscribed_channels() == 1));
        let released_at = Instant::now();
        let given: u32 = give
            .key(&keys[..])
            .arg(&hand_id[..])
            .invoke(&mut connection(&redis))
            .unwrap();
        assert_eq!(given, 1);
        let (got, woke_at) = waiter.join().unwrap();
        assert!(matches!(got, Some(Ok(()))));
        assert!(woke_at - released_at < Duration::from_secs(1));
    });

    // A permit the hand-written client took with a short lease comes back to a library
    // waiter when the lease ends, without any message from its holder.
    assert!(hand_take(300));
    let started = Instant::now();
    let guard = semaphore.try_lock_for(PATIENCE).unwrap();
    assert!(guard.is_some(), "the hand-written permit expired");
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(guard);
    assert_left_nothing(&manager, &redis, "mixed");
}

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let semaphore = manager.permit_semaphore("strict");
    assert!(semaphore.try_set_permits(1).unwrap());
    fn invalid<T: std::fmt::Debug>(outcome: redlease::Result<T>) {
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{outcome:?}"
        );
    }
    invalid(semaphore.leased_for(Duration::ZERO).lock());
    invalid(semaphore.leased_for(Duration::MAX).lock());
    invalid(semaphore.try_lock_for(Duration::MAX));
    match semaphore.try_lock_for(Duration::MAX) {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains("try_lock_for"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    invalid(
        semaphore
            .leased_for(Duration::ZERO)
            .try_lock_until(Instant::now()),
    );
    invalid(semaphore.with_lock_for(Duration::MAX, |_| ()));
    invalid(semaphore.leased_for(Duration::ZERO).with_lock(|_| ()));
    invalid(
        semaphore
            .leased_for(Duration::ZERO)
            .try_lock_for(Duration::ZERO),
    );
    invalid(semaphore.add_permits(0));
    invalid(semaphore.add_permits(-2));
    invalid(semaphore.release_id("not an id"));
    invalid(semaphore.release_id(&"g".repeat(32)));
    invalid(manager.permit_semaphore("").try_lock());
    assert!(matches!(
        semaphore.release_id(&"ab".repeat(16)),
        Err(Error::NotHeld { .. })
    ));
    assert_eq!(semaphore.available_permits().unwrap(), 1, "nothing changed");

    // A name, or its zset of permits, taken by a key of another kind.
    redis.command(&["HSET", "a-hash", "f", "1"]).unwrap();
    redis.command(&["SET", "bad-zset", "1"]).unwrap();
    redis.command(&["SET", "{bad-zset}:timeout", "x"]).unwrap();
    for name in ["a-hash", "bad-zset"] {
        let other = manager.permit_semaphore(name);
        fn wrong<T: std::fmt::Debug>(name: &str, outcome: redlease::Result<T>) {
            assert!(
                matches!(&outcome, Err(Error::WrongType { name: named }) if named == name),
                "{name}: {outcome:?}"
            );
        }
        wrong(name, other.try_lock());
        wrong(name, other.try_lock_for(Duration::from_millis(10)));
        wrong(name, other.available_permits());
        wrong(name, other.add_permits(1));
        wrong(name, other.release_id(&"ab".repeat(16)));
    }
    assert!(redis
        .command(&["GET", "{bad-zset}:timeout"])
        .unwrap()
        .ends_with("x\r\n"));
    assert_eq!(manager.watched_locks(), 0);
    assert_left_nothing(&manager, &redis, "strict");
}

#[test]
fn redis_down_or_a_manager_shut_down_is_an_error_not_a_hang() {
    let mut redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let semaphore = manager.permit_semaphore("gone");
    assert!(semaphore.try_set_permits(1).unwrap());
    let guard = semaphore.lock().unwrap();
    redis.kill().unwrap();
    let started = Instant::now();
    let outcome = semaphore.try_lock_for(Duration::from_secs(2));
    assert!(
        matches!(outcome, Err(Error::Unreachable(_) | Error::Timeout(_))),
        "{outcome:?}"
    );
    assert!(started.elapsed() < PATIENCE);
    assert!(matches!(
        guard.unlock(),
        Err(Error::Unreachable(_) | Error::Timeout(_))
    ));
    assert_eq!(manager.watched_locks(), 0);
    manager.shutdown();
    assert!(matches!(semaphore.lock(), Err(Error::ShutDown)));
}

/// The permissions the semaphores need, as `ACL SETUSER` rules: the commands the crate sends,
/// those its scripts run (the watchdog's renewal of a permit included), the keys under the
/// names used (`acl:*`, its permit zsets `{acl:*`, and the channel, which the scripts take as
/// a key) and the channels.
const SEMAPHORE_ACL: &[&str] = &[
    "+ping",
    "+evalsha",
    "+eval",
    "+script|load",
    "+subscribe",
    "+unsubscribe",
    "+get",
    "+set",
    "+unlink",
    "+incrby",
    "+decrby",
    "+publish",
    "+time",
    "+zadd",
    "+zrem",
    "+zrange",
    "+zrangebyscore",
    "+zscore",
    "+pttl",
    "+pexpire",
    "~acl:*",
    "~{acl:*",
    "~redisson_sc:*",
    "~redlease_request:*",
    "&redisson_sc*",
    "&redlease_lock__force_release",
];

#[test]
fn a_user_with_only_the_listed_permissions_uses_both_semaphores() {
    let redis = server();
    let mut words = vec!["ACL", "SETUSER", "sem", "reset", "on", ">sem-secret"];
    words.extend(SEMAPHORE_ACL);
    assert!(redis.command(&words).unwrap().starts_with("+OK"));
    let url = format!("redis://sem:sem-secret@127.0.0.1:{}/", redis.port());
    let manager = manager_for_url(&url, SHORT_WATCHDOG);

    let counted = manager.semaphore("acl:counted");
    assert!(counted.try_set_permits(0).unwrap());
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| counted.try_acquire_for(2, PATIENCE).unwrap());
        assert!(eventually(PATIENCE, || manager.subscribed_channels() == 1));
        counted.release(1).unwrap();
        assert_eq!(counted.add_permits(1).unwrap(), 2);
        assert!(waiter.join().unwrap());
    });
    counted.release(3).unwrap();
    assert_eq!(counted.drain_permits().unwrap(), 3);

    let expiring = manager.permit_semaphore("acl:expiring");
    assert!(expiring.try_set_permits(2).unwrap());
    let kept = expiring.lock().unwrap();
    let brief = expiring
        .leased_for(Duration::from_millis(200))
        .lock()
        .unwrap();
    // The brief permit comes back by itself; the kept one is renewed past its lease.
    let rival = manager_for_url(&url, LONG_WATCHDOG).permit_semaphore("acl:expiring");
    let back = rival.try_lock_for(PATIENCE).unwrap().expect("expired");
    assert!(matches!(brief.unlock(), Err(Error::NotHeld { .. })));
    assert!(rival.try_lock_for(SHORT_WATCHDOG * 2).unwrap().is_none());
    assert!(kept.check().is_ok());
    expiring.release_id(back.permit_id()).unwrap();
    assert!(matches!(back.unlock(), Err(Error::NotHeld { .. })));
    kept.unlock().unwrap();
    assert_eq!(expiring.available_permits().unwrap(), 2);
    assert_eq!(manager.watched_locks(), 0);
}

#[test]
fn a_take_gives_the_permit_zset_the_expiry_of_the_count_as_redisson_does() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let mut plain = connection(&redis);
    let pttl = |plain: &mut redis::Connection, key: &str| -> i64 {
        redis::cmd("PTTL").arg(key).query(plain).unwrap()
    };
    let exists = |plain: &mut redis::Connection, key: &str| -> bool {
        redis::cmd("EXISTS").arg(key).query::<i64>(plain).unwrap() == 1
    };

    // An expiry on the count alone (as Redisson's expire() leaves it when no permit is taken:
    // it PEXPIREs both keys, and the zset does not exist): a take copies it onto the zset, as
    // Redisson's acquire does.
    let semaphore = manager.permit_semaphore("ttl-copied");
    assert!(semaphore.try_set_permits(2).unwrap());
    let set: i64 = redis::cmd("PEXPIRE")
        .arg("ttl-copied")
        .arg(60_000)
        .query(&mut plain)
        .unwrap();
    assert_eq!(set, 1);
    let guard = semaphore.lock().unwrap();
    let (count_ttl, zset_ttl) = (
        pttl(&mut plain, "ttl-copied"),
        pttl(&mut plain, &timeouts_key("ttl-copied")),
    );
    assert!(
        zset_ttl > 0 && (count_ttl - zset_ttl).abs() <= 1_000,
        "the zset's TTL {zset_ttl} ms, the count's {count_ttl} ms"
    );
    // A count without expiry leaves the zset's as it is (Redisson copies only a TTL > 0).
    let persisted: i64 = redis::cmd("PERSIST")
        .arg("ttl-copied")
        .query(&mut plain)
        .unwrap();
    assert_eq!(persisted, 1);
    let second = semaphore.lock().unwrap();
    assert_eq!(pttl(&mut plain, "ttl-copied"), -1);
    assert!(pttl(&mut plain, &timeouts_key("ttl-copied")) > 0);
    drop((guard, second));
    assert_eq!(semaphore.available_permits().unwrap(), 2);
    assert_left_nothing(&manager, &redis, "ttl-copied");

    // The count expires with a permit taken: the zset goes with it, so a count set anew is
    // not handed the expired permit.
    let semaphore = manager.permit_semaphore("ttl-gone");
    assert!(semaphore.try_set_permits(1).unwrap());
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("ttl-gone")
        .arg(500)
        .query(&mut plain)
        .unwrap();
    // Kept to the end: its release would give the permit back to the expired count.
    let brief = semaphore
        .leased_for(Duration::from_millis(100))
        .lock()
        .unwrap();
    assert!(eventually(PATIENCE, || !exists(&mut plain, "ttl-gone")));
    assert!(
        !exists(&mut plain, &timeouts_key("ttl-gone")),
        "the zset of permits taken outlived the count"
    );
    assert!(semaphore.try_set_permits(3).unwrap());
    assert_eq!(semaphore.available_permits().unwrap(), 3);
    assert!(matches!(brief.unlock(), Err(Error::NotHeld { .. })));
    assert_eq!(semaphore.available_permits().unwrap(), 3);
    assert_left_nothing(&manager, &redis, "ttl-gone");
}

/// The permit semaphore has the lock's set of acquisition forms, under a semaphore's names.
#[test]
fn every_form_of_acquisition_takes_a_permit_and_gives_it_back() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let semaphore = manager.permit_semaphore("forms");
    assert!(semaphore.try_set_permits(1).unwrap());
    let seen = semaphore.with_lock(|_| semaphore.available_permits().unwrap());
    assert_eq!(seen.unwrap(), 0, "held while the work ran");
    assert_eq!(
        semaphore.available_permits().unwrap(),
        1,
        "given back after it"
    );
    let lease = Duration::from_secs(60);
    let ran = semaphore
        .leased_for(lease)
        .with_lock(|permit| permit.is_lost());
    assert!(!ran.unwrap());
    let held = semaphore
        .leased_for(lease)
        .try_lock_until(Instant::now() + PATIENCE)
        .unwrap()
        .expect("a free permit");
    let ran = semaphore.with_lock_for(Duration::from_millis(50), |_| ());
    assert!(
        ran.unwrap().is_none(),
        "no permit free: the work did not run"
    );
    held.unlock().unwrap();
    assert_eq!(semaphore.with_lock_for(PATIENCE, |_| 7).unwrap(), Some(7));
    assert_left_nothing(&manager, &redis, "forms");
}
