//! The check of the servers' settings on real servers: an eviction policy that drops a held
//! lock (shown dropping one), fewer replicas than the acknowledgements asked for, told by
//! `build` (a warning, or with `ServerCheck::Strict` a refusal) and by `check_server`.

use crate::common;

use std::time::Duration;

use redlease::{Error, Finding, LockManager, LostReason, ServerCheck};
use redlease_testing::RedisServer;

const PATIENCE: Duration = Duration::from_secs(10);

fn builder(redis: &RedisServer) -> redlease::LockManagerBuilder {
    LockManager::builder(redis.url())
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
}

fn with_policy(policy: &str) -> RedisServer {
    RedisServer::start_with_args(&["--maxmemory", "10mb", "--maxmemory-policy", policy])
        .expect("redis-server")
}

#[test]
fn a_server_that_may_evict_locks_is_told_at_build_and_refused_when_strict() {
    for policy in ["allkeys-lru", "volatile-lru", "volatile-ttl"] {
        let redis = with_policy(policy);
        let manager = builder(&redis).build().expect("a warning, not a refusal");
        let findings = manager.check_server().unwrap();
        match findings.as_slice() {
            [Finding::Eviction {
                policy: found,
                maxmemory,
                ..
            }] => {
                assert_eq!(found, policy);
                assert_eq!(*maxmemory, 10 * 1024 * 1024);
            }
            other => panic!("{policy}: {other:?}"),
        }
        let refused = builder(&redis).server_check(ServerCheck::Strict).build();
        match refused {
            Err(Error::UnsafeServer { findings: told }) => assert_eq!(told, findings),
            other => panic!("{policy}: not refused: {other:?}"),
        }
    }
    // A server that evicts nothing passes the strict check.
    let redis = with_policy("noeviction");
    let manager = builder(&redis).server_check(ServerCheck::Strict).build();
    assert!(manager.unwrap().check_server().unwrap().is_empty());
}

/// What the finding warns of, made to happen: under `volatile-ttl` the keys with a TTL go
/// first, and a held lock's key always has one. Once memory runs short the lock is evicted, a
/// second holder takes it, and the first learns of it only at its next renewal.
#[test]
fn under_an_evicting_policy_a_held_lock_is_evicted_and_taken_by_another() {
    let redis = with_policy("volatile-ttl");
    // Renewed every 3 s: the lease (9 s) does not run out by itself, however slow the run.
    let holder = builder(&redis)
        .watchdog_timeout(Duration::from_secs(9))
        .server_check(ServerCheck::Off)
        .build()
        .unwrap();
    let guard = holder.lock("evicted").lock().unwrap();
    let lost = guard.lost_signal();
    let mut filler = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let value = vec![b'x'; 256 * 1024];
    for index in 0..200 {
        let exists: bool = redis::cmd("EXISTS")
            .arg("evicted")
            .query(&mut filler)
            .unwrap();
        if !exists {
            break;
        }
        // Without a TTL, so that the lock's key is the one to go; a write refused for lack
        // of memory ends the filling.
        let written: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("filler:{index}"))
            .arg(&value)
            .query(&mut filler);
        if written.is_err() {
            break;
        }
    }
    let exists: bool = redis::cmd("EXISTS")
        .arg("evicted")
        .query(&mut filler)
        .unwrap();
    assert!(!exists, "the held lock's key is gone");
    let stats: String = redis::cmd("INFO").arg("stats").query(&mut filler).unwrap();
    let evicted = stats
        .lines()
        .find_map(|line| line.strip_prefix("evicted_keys:"))
        .and_then(|count| count.trim().parse::<u64>().ok());
    assert!(
        evicted.is_some_and(|count| count >= 1),
        "evicted, not expired: {evicted:?}"
    );
    // The burst's memory is given back, and the lock is free for anyone.
    for index in 0..200 {
        let _: () = redis::cmd("DEL")
            .arg(format!("filler:{index}"))
            .query(&mut filler)
            .unwrap();
    }
    let rival = common::manager(&redis, Duration::from_secs(30));
    let taken = rival.lock("evicted").try_lock().unwrap();
    assert!(taken.is_some(), "the evicted lock is taken by another");
    assert_eq!(
        lost.recv_timeout(PATIENCE),
        Ok(LostReason::NotHeldAnymore),
        "the first holder learns it at its next renewal"
    );
}

#[test]
fn fewer_replicas_than_the_acknowledgements_asked_for_are_told() {
    let (master, replica) = RedisServer::start_with_replica().expect("redis-server pair");
    master
        .wait_for_replica_acks(1, PATIENCE)
        .expect("the replica connects");
    let asking = |replicas: u32| {
        builder(&master)
            .replica_acks(replicas, Duration::from_millis(500))
            .server_check(ServerCheck::Strict)
    };
    let enough = asking(1).build().expect("one replica, one asked for");
    assert!(enough.check_server().unwrap().is_empty());
    match asking(2).build() {
        Err(Error::UnsafeServer { findings }) => match findings.as_slice() {
            [Finding::TooFewReplicas {
                online: 1,
                required: 2,
                ..
            }] => {}
            other => panic!("{other:?}"),
        },
        other => panic!("not refused: {other:?}"),
    }
    drop(replica);
}
