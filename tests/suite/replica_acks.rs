//! Replica acknowledgements (`LockManagerBuilder::replica_acks`) against a real master and a
//! replica started with `--replicaof`: acknowledged acquisitions are on the replica; with the
//! replica paused (SIGSTOP), acquisitions are undone and fail with `NotReplicated`, leaving
//! nothing on the master, while renewals and releases stand and are counted; built
//! `without_replica_acks`, no `WAIT` is sent at all, replica or not.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, RedisServer};
use redlease::{Error, LockManager, MultiLock};

/// How long a write waits for its replica: short, as every paused attempt costs it.
const ACK_TIMEOUT: Duration = Duration::from_millis(200);

/// Beyond the ack timeout, how long a refused acquisition may take: its undo, on a loaded
/// machine.
const MARGIN: Duration = Duration::from_secs(2);

/// How long a resumed replica may take to apply what it missed.
const CATCH_UP: Duration = Duration::from_secs(5);

fn pair() -> (RedisServer, RedisServer) {
    RedisServer::start_with_replica()
        .expect("start a redis-server master and replica (install redis-server)")
}

/// A manager on `master` whose writes wait for one replica.
fn acked_manager(master: &RedisServer, watchdog: Duration) -> LockManager {
    LockManager::builder(master.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(watchdog)
        .replica_acks(1, ACK_TIMEOUT)
        .build()
        .expect("build manager")
}

/// The raw reply of `words` on `server`.
fn ask(server: &RedisServer, words: &[&str]) -> String {
    server.command(words).expect("redis command")
}

fn exists(server: &RedisServer, key: &str) -> bool {
    ask(server, &["EXISTS", key]).starts_with(":1")
}

/// A number of `INFO replication` on `server`.
fn replication_field(server: &RedisServer, field: &str) -> u64 {
    let info = ask(server, &["INFO", "replication"]);
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {info}"))
}

/// Resumes the paused replica and waits until it has applied everything the master wrote
/// meanwhile.
fn resume_and_catch_up(master: &RedisServer, replica: &RedisServer) {
    replica.resume().expect("SIGCONT the replica");
    let written = replication_field(master, "master_repl_offset");
    assert!(
        eventually(CATCH_UP, || replication_field(replica, "slave_repl_offset")
            >= written),
        "the replica did not catch up"
    );
}

/// Runs `acquisition` and asserts it failed with `NotReplicated` for `name` (no replica of
/// the one asked for acknowledged), after waiting the ack timeout and not much more.
fn assert_not_replicated<T: std::fmt::Debug>(
    name: &str,
    acquisition: impl FnOnce() -> redlease::Result<T>,
) {
    let started = Instant::now();
    let outcome = acquisition();
    let took = started.elapsed();
    match &outcome {
        Err(Error::NotReplicated {
            name: told,
            acknowledged: 0,
            required: 1,
        }) if told == name => {}
        other => panic!("{name}: expected NotReplicated, got {other:?}"),
    }
    let err = outcome.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(
        took >= ACK_TIMEOUT && took < ACK_TIMEOUT + MARGIN,
        "{name}: refused after {took:?}"
    );
}

#[test]
fn acknowledged_acquisitions_are_on_the_replica() {
    let (master, replica) = pair();
    let manager = acked_manager(&master, Duration::from_secs(30));

    let lock = manager.lock("acks:lock").lock().unwrap();
    assert!(exists(&replica, "acks:lock"));
    // Acknowledged by the master's one replica: its token survives a failover.
    assert_eq!(lock.replicas_acknowledged(), Some(1));
    let fair = manager.fair_lock("acks:fair").lock().unwrap();
    assert!(exists(&replica, "acks:fair"));
    let read_write = manager.read_write_lock("acks:rw");
    let write = read_write.write().lock().unwrap();
    assert!(ask(&replica, &["HGET", "acks:rw", "mode"]).contains("write"));
    let permits = manager.permit_semaphore("acks:permits");
    permits.try_set_permits(1).unwrap();
    let permit = permits.lock().unwrap();
    assert!(ask(&replica, &["ZCARD", "{acks:permits}:timeout"]).starts_with(":1"));
    let counted = manager.semaphore("acks:counted");
    counted.try_set_permits(2).unwrap();
    counted.acquire(2).unwrap();
    assert!(ask(&replica, &["GET", "acks:counted"]).contains("\r\n0\r\n"));
    let both = MultiLock::new([manager.lock("acks:m1"), manager.lock("acks:m2")]).unwrap();
    let group = both.lock().unwrap();
    assert!(exists(&replica, "acks:m1") && exists(&replica, "acks:m2"));
    let store = manager.fenced_store("acks:store");
    store.set(lock.fencing_token(), "kept").unwrap();
    assert!(ask(&replica, &["GET", "acks:store"]).contains("kept"));
    // A guarded write waits for the replica as an acquisition does.
    let mut status = redlease::Writes::new();
    status.set("{acks:lock}:status", "guarded");
    lock.guarded_write(&status).unwrap();
    assert!(ask(&replica, &["GET", "{acks:lock}:status"]).contains("guarded"));

    for released in [
        lock.unlock(),
        fair.unlock(),
        write.unlock(),
        permit.unlock(),
        counted.release(2),
        group.unlock(),
    ] {
        released.unwrap();
    }
    let stats = manager.stats();
    assert_eq!(
        (stats.releases_unreplicated, stats.renewals_unreplicated),
        (0, 0)
    );
    assert!(ask(&master, &["INFO", "commandstats"]).contains("cmdstat_wait:"));
}

#[test]
fn without_replica_acks_no_wait_is_sent() {
    let (redis, _replica) = pair();
    let manager = LockManager::builder(redis.url())
        .without_replica_acks()
        .build()
        .expect("build manager");
    // The fixture's own `WAIT`s (it waited for the replica) forgotten.
    ask(&redis, &["CONFIG", "RESETSTAT"]);
    let guard = manager.lock("plain").lock().unwrap();
    // Nothing was asked of replicas: the guard cannot say its token survives a failover.
    assert_eq!(guard.replicas_acknowledged(), None);
    guard.unlock().unwrap();
    let permits = manager.permit_semaphore("plain:permits");
    permits.try_set_permits(1).unwrap();
    permits.lock().unwrap().unlock().unwrap();
    manager.fenced_store("plain:store").set(1, "value").unwrap();
    let commands = ask(&redis, &["INFO", "commandstats"]);
    assert!(commands.contains("cmdstat_evalsha:"), "{commands}");
    assert!(!commands.contains("cmdstat_wait:"), "{commands}");
}

#[test]
fn an_acquisition_short_of_acks_is_undone_and_told() {
    let (master, replica) = pair();
    let manager = acked_manager(&master, Duration::from_secs(30));
    let permits = manager.permit_semaphore("acks:permits");
    permits.try_set_permits(1).unwrap();
    let counted = manager.semaphore("acks:counted");
    counted.try_set_permits(1).unwrap();
    let store = manager.fenced_store("acks:store");
    let both = MultiLock::new([manager.lock("acks:m1"), manager.lock("acks:m2")]).unwrap();

    replica.pause().expect("SIGSTOP the replica");
    // Tries: they end with the error (a blocking wait rides it out: see the test after this
    // one).
    assert_not_replicated("acks:lock", || manager.lock("acks:lock").try_lock());
    assert!(!exists(&master, "acks:lock"));
    assert_not_replicated("acks:fair", || manager.fair_lock("acks:fair").try_lock());
    for key in [
        "acks:fair",
        "redisson_lock_queue:{acks:fair}",
        "redisson_lock_timeout:{acks:fair}",
    ] {
        assert!(!exists(&master, key), "{key} was left behind");
    }
    let read_write = manager.read_write_lock("acks:rw");
    assert_not_replicated("acks:rw", || read_write.write().try_lock());
    assert!(!exists(&master, "acks:rw"));
    assert_not_replicated("acks:permits", || permits.try_lock());
    assert!(ask(&master, &["ZCARD", "{acks:permits}:timeout"]).starts_with(":0"));
    assert_eq!(permits.available_permits().unwrap(), 1);
    assert_not_replicated("acks:counted", || counted.try_acquire(1));
    assert_eq!(counted.available_permits().unwrap(), 1);
    assert_not_replicated("acks:m1", || both.try_lock());
    assert!(!exists(&master, "acks:m1") && !exists(&master, "acks:m2"));
    // A fenced write is told too, but stands on the master.
    assert_not_replicated("acks:store", || store.set(1, "unconfirmed"));
    assert!(ask(&master, &["GET", "acks:store"]).contains("unconfirmed"));
    assert_eq!(manager.watched_locks(), 0, "nothing is held");

    resume_and_catch_up(&master, &replica);
    let lock = manager.lock("acks:lock").lock().unwrap();
    let fair = manager.fair_lock("acks:fair").lock().unwrap();
    let write = read_write.write().lock().unwrap();
    let permit = permits.lock().unwrap();
    for key in [
        "acks:lock",
        "acks:fair",
        "acks:rw",
        "{acks:permits}:timeout",
    ] {
        assert!(exists(&replica, key), "{key} is not on the replica");
    }
    for released in [
        lock.unlock(),
        fair.unlock(),
        write.unlock(),
        permit.unlock(),
    ] {
        released.unwrap();
    }
}

/// A blocking wait rides out a replica that does not acknowledge, as it rides out an outage:
/// each grant short of acknowledgements is given back, and the wait goes on until one is
/// acknowledged.
#[test]
fn a_blocking_wait_rides_out_a_replication_shortfall() {
    let (master, replica) = pair();
    let manager = acked_manager(&master, Duration::from_secs(30));
    replica.pause().expect("SIGSTOP the replica");
    let waiter = {
        let manager = manager.clone();
        std::thread::spawn(move || {
            manager
                .lock("acks:waits")
                .lock()
                .map(|guard| guard.fencing_token())
        })
    };
    // A few grants are given back meanwhile.
    assert!(
        eventually(CATCH_UP, || manager.stats().waiting == 1),
        "the wait goes on after its first grant was given back"
    );
    assert!(!exists(&master, "acks:waits"));
    resume_and_catch_up(&master, &replica);
    let token = waiter.join().unwrap();
    assert!(token.is_ok(), "{token:?}");
}

#[test]
fn a_renewal_short_of_acks_keeps_the_lock_and_is_counted() {
    let (master, replica) = pair();
    // Renewals every 300 ms; each one waits up to the 200 ms ack timeout.
    let manager = acked_manager(&master, Duration::from_millis(900));
    let guard = manager.lock("acks:renewed").lock().unwrap();

    replica.pause().expect("SIGSTOP the replica");
    assert!(
        eventually(Duration::from_secs(5), || manager
            .stats()
            .renewals_unreplicated
            >= 3),
        "renewals were not counted as unreplicated: {:?}",
        manager.stats()
    );
    assert!(!guard.is_lost());
    let stats = manager.stats();
    assert_eq!(stats.renewals_failed, 0, "{stats:?}");
    assert_eq!(stats.lost_lease_expired + stats.lost_not_held_anymore, 0);
    // The lease is the watchdog's, freshly extended: more than one renewal interval left.
    let ttl: u64 = ask(&master, &["PTTL", "acks:renewed"])
        .trim_start_matches(':')
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 300, "PTTL {ttl}");

    resume_and_catch_up(&master, &replica);
    guard.unlock().unwrap();
}

#[test]
fn a_release_short_of_acks_stands_and_is_counted() {
    let (master, replica) = pair();
    let manager = acked_manager(&master, Duration::from_secs(30));
    let lock = manager.lock("acks:released").lock().unwrap();
    let permits = manager.permit_semaphore("acks:permits");
    permits.try_set_permits(1).unwrap();
    let permit = permits.lock().unwrap();
    let counted = manager.semaphore("acks:counted");
    counted.try_set_permits(1).unwrap();
    counted.acquire(1).unwrap();

    replica.pause().expect("SIGSTOP the replica");
    let started = Instant::now();
    lock.unlock().unwrap();
    permit.unlock().unwrap();
    counted.release(1).unwrap();
    let took = started.elapsed();
    assert!(
        took >= ACK_TIMEOUT && took < 3 * ACK_TIMEOUT + MARGIN,
        "three releases took {took:?}"
    );
    assert_eq!(manager.stats().releases_unreplicated, 3);
    assert!(!exists(&master, "acks:released"));
    assert_eq!(permits.available_permits().unwrap(), 1);
    assert_eq!(counted.available_permits().unwrap(), 1);

    resume_and_catch_up(&master, &replica);
    assert!(!exists(&replica, "acks:released"));
}

/// A master just promoted has an empty script cache, and often fewer replicas than asked
/// for: the first release (or renewal) there meets `NOSCRIPT` behind a `WAIT` that answers
/// only at its timeout. The script is loaded and run all the same; the release stands and is
/// counted, and the renewal keeps the lock.
#[test]
fn an_empty_script_cache_with_replicas_short_costs_one_ack_timeout_not_the_call() {
    let (master, replica) = pair();
    let watchdog = Duration::from_secs(3);
    // An ack timeout longer than the response timeout: the `WAIT` in the way outlasts the
    // time the call itself is given.
    let ack_timeout = Duration::from_millis(900);
    let manager = LockManager::builder(master.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(250))
        .watchdog_timeout(watchdog)
        .replica_acks(1, ack_timeout)
        .build()
        .expect("build manager");
    let released = manager.lock("acks:flushed-release").lock().unwrap();
    let renewed = manager.lock("acks:flushed-renewal").lock().unwrap();

    replica.pause().expect("SIGSTOP the replica");
    ask(&master, &["SCRIPT", "FLUSH"]);
    let started = Instant::now();
    released.unlock().expect("a release short of acks stands");
    let took = started.elapsed();
    assert!(took < 2 * ack_timeout + MARGIN, "the release took {took:?}");
    assert_eq!(manager.stats().releases_unreplicated, 1);
    assert!(!exists(&master, "acks:flushed-release"));

    ask(&master, &["SCRIPT", "FLUSH"]);
    let renewals_before = manager.stats().renewals_unreplicated;
    assert!(eventually(2 * watchdog, || manager
        .stats()
        .renewals_unreplicated
        >= renewals_before + 2));
    assert!(!renewed.is_lost(), "{:?}", renewed.check());
    let pttl: i64 = ask(&master, &["PTTL", "acks:flushed-renewal"])
        .trim_start_matches(':')
        .trim()
        .parse()
        .unwrap();
    assert!(pttl > 0);

    resume_and_catch_up(&master, &replica);
    renewed.unlock().unwrap();
}

/// A master demoted while an acquisition waits for its replicas answers the `WAIT` with
/// `-UNBLOCKED`: that is an outage like the failover it comes from, and the wait rides it
/// out up to its deadline, then takes the lock once the server is a master again.
#[test]
fn a_wait_unblocked_by_a_demotion_rides_it_out() {
    let (master, replica) = pair();
    let manager = LockManager::builder(master.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .replica_acks(1, Duration::from_secs(8))
        .outage_grace(Duration::from_secs(30))
        .build()
        .expect("build manager");
    // The script cached, so that the `WAIT` that blocks is the one behind the acquisition.
    let lock = manager.lock("unblocked");
    lock.lock().expect("lock").unlock().expect("unlock");
    replica.pause().expect("SIGSTOP the replica");
    let waiting = std::thread::spawn({
        let manager = manager.clone();
        move || {
            let started = Instant::now();
            let outcome = manager
                .lock("unblocked")
                .try_lock_for(Duration::from_secs(60));
            (
                outcome.map(|guard| guard.map(|guard| guard.unlock())),
                started.elapsed(),
            )
        }
    });
    assert!(
        eventually(Duration::from_secs(10), || ask(
            &master,
            &["INFO", "clients"]
        )
        .contains("blocked_clients:1")),
        "the acquisition never waited for its replica"
    );
    // Demoted: the `WAIT` is answered `-UNBLOCKED`, and writes `READONLY`, until it is a
    // master again.
    let replica_port = replica.port().to_string();
    ask(&master, &["REPLICAOF", "127.0.0.1", &replica_port]);
    // Demoted until the acquisition has been refused as a replica once (or has ended).
    assert!(
        eventually(Duration::from_secs(20), || waiting.is_finished()
            || ask(&master, &["INFO", "errorstats"])
                .contains("errorstat_READONLY")),
        "the acquisition neither ended nor tried again"
    );
    ask(&master, &["REPLICAOF", "NO", "ONE"]);
    resume_and_catch_up(&master, &replica);
    let (outcome, took) = waiting.join().expect("waiting thread");
    let unlocked = outcome
        .expect("the demotion is an outage that the wait rides out")
        .expect("the lock is free once the server is a master again");
    unlocked.expect("unlock");
    assert!(took < Duration::from_secs(60), "took {took:?}");
}
