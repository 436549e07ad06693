//! Sentinel mode against a real deployment on loopback: a master, two replicas and three
//! sentinels with `down-after-milliseconds` 1000. The master is killed with SIGKILL while a
//! lock is held and a waiter waits; the manager must follow the failover.

use crate::common;
use crate::common::sentinel;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{assert_no_second_holder, eventually, BlockedTry};
use redlease::{Error, LockManager};
use sentinel::{Deployment, Sentinel, MASTER_NAME};

/// The `PTTL` of `key` on `server`, in ms.
fn pttl_on(server: &common::RedisServer, key: &str) -> i64 {
    let reply = server.command(&["PTTL", key]).expect("PTTL");
    reply
        .trim_start_matches(':')
        .trim()
        .parse()
        .expect("a PTTL")
}

/// A manager on the deployment's sentinels, with short timeouts.
fn sentinel_manager(deployment: &Deployment, watchdog: Duration) -> LockManager {
    LockManager::builder_sentinel(deployment.sentinel_urls(), MASTER_NAME)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .watchdog_timeout(watchdog)
        .outage_grace(Duration::from_secs(30))
        .build()
        .expect("manager in sentinel mode")
}

/// How much later than any renewal before the kill could have set it a lease must end, to be
/// one renewed after it.
const MARGIN: Duration = Duration::from_millis(500);

#[test]
fn a_failover_moves_locks_waiters_and_renewals_to_the_new_master() {
    let mut deployment = Deployment::start(2);
    let watchdog = Duration::from_secs(9);
    let holder = sentinel_manager(&deployment, watchdog);
    let waiter = sentinel_manager(&deployment, watchdog);
    let guard = holder.lock("job").lock().expect("lock before the failover");

    let (acquired, woken) = mpsc::channel();
    let waiting = thread::spawn({
        let waiter = waiter.clone();
        move || {
            let guard = waiter.lock("job").lock();
            let _ = acquired.send(Instant::now());
            guard.map(drop)
        }
    });
    assert!(eventually(Duration::from_secs(5), || waiter
        .subscribed_channels()
        == 1));

    let old_port = deployment.kill_master();
    let killed_at = Instant::now();
    // An acquisition asked for while the master is down waits through the failover.
    let during = thread::spawn({
        let holder = holder.clone();
        move || {
            let guard = holder.lock("asked-during-the-failover").lock()?;
            let taken_after = killed_at.elapsed();
            guard.unlock()?;
            Ok::<_, Error>(taken_after)
        }
    });
    let new_port = deployment.wait_for_failover(old_port, Duration::from_secs(30));
    assert_ne!(new_port, old_port);
    println!("failover took {:?}", killed_at.elapsed());
    let taken_after = during
        .join()
        .expect("thread")
        .expect("a lock asked for during the failover is granted after it");
    println!("lock asked for during the failover taken {taken_after:?} after the kill");

    // The new master serves new acquisitions, through the manager that was there before.
    let started = Instant::now();
    let other = holder
        .lock("other-job")
        .try_lock_for(Duration::from_secs(20))
        .expect("try_lock_for after the failover")
        .expect("the new master grants a free lock");
    println!(
        "first acquisition after the failover: {:?}",
        started.elapsed()
    );
    other.unlock().expect("unlock on the new master");

    // The held lock is renewed on the new master (its key reached the promoted replica) or
    // reported lost: never held by two. Renewed after the kill is a TTL ending later than a
    // renewal before it could have set (by a margin). Judged on the master the sentinels name
    // at each look (a loaded machine may see a second failover), and by the key itself: a
    // renewal sent may have failed and been tried again.
    let renewed = |deployment: &Deployment| {
        let pttl = pttl_on(deployment.master(), "job");
        pttl > 0 && killed_at.elapsed() + Duration::from_millis(pttl as u64) > watchdog + MARGIN
    };
    assert!(
        eventually(Duration::from_secs(15), || guard.is_lost()
            || renewed(&deployment)),
        "the held lock was neither renewed on the new master nor reported lost: PTTL {} on {}",
        pttl_on(deployment.master(), "job"),
        deployment.master().port()
    );
    if guard.is_lost() {
        println!("the held lock was reported lost: {:?}", guard.check());
    } else {
        assert!(
            woken.try_recv().is_err(),
            "the waiter took a lock that is still held"
        );
    }

    // The release on the new master wakes the waiter that waited through the failover.
    let released_at = Instant::now();
    let lost = guard.is_lost();
    drop(guard);
    let woken_at = woken
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter takes the lock after the failover");
    if !lost {
        let wake = woken_at.saturating_duration_since(released_at);
        println!("waiter woken {wake:?} after the release");
        assert!(
            wake < Duration::from_secs(4),
            "the waiter slept {wake:?} past the release (lease {watchdog:?})"
        );
    }
    waiting
        .join()
        .expect("waiter thread")
        .expect("waiter's lock");
}

#[test]
fn a_master_unknown_to_the_sentinels_is_a_typed_error() {
    let server = common::server();
    let sentinel = Sentinel::start(server.port()).expect("sentinel");
    let refused = LockManager::builder_sentinel([sentinel.url()], "no-such-master")
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build();
    assert!(
        matches!(&refused, Err(Error::UnknownMaster { name }) if name == "no-such-master"),
        "{refused:?}"
    );
    let no_sentinel = LockManager::builder_sentinel(Vec::<String>::new(), MASTER_NAME).build();
    assert!(
        matches!(no_sentinel, Err(Error::InvalidArgument(_))),
        "{no_sentinel:?}"
    );
}

#[test]
fn a_sentinel_manager_finds_the_master_and_locks_on_it() {
    let server = common::server();
    let sentinel = Sentinel::start(server.port()).expect("sentinel");
    let manager = LockManager::builder_sentinel([sentinel.url()], MASTER_NAME)
        .build()
        .expect("manager");
    let guard = manager.lock("found").lock().expect("lock");
    assert_eq!(
        server.command(&["EXISTS", "found"]).expect("EXISTS"),
        ":1\r\n"
    );
    let mut status = redlease::Writes::new();
    status.set("{found}:status", "guarded");
    guard
        .guarded_write(&status)
        .expect("a guarded write on the master");
    assert_eq!(
        server.command(&["GET", "{found}:status"]).expect("GET"),
        "$7\r\nguarded\r\n"
    );
    drop(guard);
    manager.shutdown();
}

/// With every acquisition acknowledged by both replicas, a failover cannot erase a held lock:
/// whichever replica is promoted has it, and the watchdog renews it there. Five deployments
/// fail over at once, so the runs share the machine but not their servers.
#[test]
fn with_replica_acks_a_held_lock_survives_the_failover_in_every_run() {
    const RUNS: usize = 5;
    let outcomes: Vec<Result<Duration, String>> = thread::scope(|scope| {
        let runs: Vec<_> = (0..RUNS)
            .map(|run| scope.spawn(move || survives_a_failover(run)))
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("run thread"))
            .collect()
    });
    for (run, outcome) in outcomes.iter().enumerate() {
        println!("run {run}: {outcome:?}");
    }
    assert!(
        outcomes.iter().all(Result::is_ok),
        "a held lock did not survive: {outcomes:?}"
    );
}

/// One run: answers how long the failover took, or what went wrong.
fn survives_a_failover(run: usize) -> Result<Duration, String> {
    let mut deployment = Deployment::start(2);
    let watchdog = Duration::from_secs(9);
    let manager = LockManager::builder_sentinel(deployment.sentinel_urls(), MASTER_NAME)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .watchdog_timeout(watchdog)
        .replica_acks(2, Duration::from_secs(1))
        .build()
        .map_err(|err| format!("build: {err}"))?;
    let name = format!("acknowledged-{run}");
    let guard = manager
        .lock(&name)
        .lock()
        .map_err(|err| format!("lock: {err}"))?;

    let old_port = deployment.kill_master();
    let killed_at = Instant::now();
    let new_port = deployment.wait_for_failover(old_port, Duration::from_secs(30));
    let failover = killed_at.elapsed();

    let renewals_before = manager.stats().renewals_sent;
    let renewed = eventually(Duration::from_secs(15), || {
        guard.is_lost() || manager.stats().renewals_sent >= renewals_before + 2
    });
    if !renewed || guard.is_lost() {
        return Err(format!("lost after the failover: {:?}", guard.check()));
    }
    // Renewed there: more lease left than the first one has (it began before the kill).
    let pttl = pttl_on(deployment.server_on(new_port), &name);
    if pttl <= watchdog.as_millis() as i64 / 2 {
        return Err(format!("not renewed on the new master: PTTL {pttl}"));
    }
    guard
        .unlock()
        .map_err(|err| format!("unlock on the new master: {err}"))?;
    Ok(failover)
}

/// A call blocked on a frozen master through its failover is answered once the old master
/// wakes, still a master in its own eyes. Neither that answer nor its connection may be
/// trusted: a lock granted there is on a server the sentinels demoted, invisible to every
/// manager that follows them, so two holders would hold it at once.
#[test]
fn a_connection_to_a_demoted_master_is_never_used_again() {
    let deployment = Deployment::start(2);
    // Long enough for a call to stay blocked on the frozen master through the failover.
    let manager = LockManager::builder_sentinel(deployment.sentinel_urls(), MASTER_NAME)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(30))
        .watchdog_timeout(Duration::from_secs(9))
        .outage_grace(Duration::from_secs(30))
        .build()
        .expect("manager in sentinel mode");
    manager
        .lock("warm")
        .lock()
        .expect("lock")
        .unlock()
        .expect("unlock");
    let old_master = deployment.master();
    let old_port = old_master.port();

    old_master.pause().expect("SIGSTOP the master");
    let blocked = BlockedTry::start(&manager, "blocked");
    let new_port = deployment.wait_for_failover(old_port, Duration::from_secs(30));
    // The manager follows the sentinels: a short try reaches the new master.
    assert!(
        eventually(Duration::from_secs(30), || manager
            .lock("probe")
            .try_lock_for(Duration::from_millis(300))
            .is_ok_and(|guard| guard.is_some())),
        "the manager never reached the new master"
    );
    old_master.resume().expect("SIGCONT the old master");
    let answered = blocked.answered(Duration::from_secs(90));
    let other = sentinel_manager(&deployment, Duration::from_secs(9));
    // The old master still takes writes until the sentinels demote it: a lock taken now
    // must be taken on the new master, where every other manager looks.
    let _first = assert_no_second_holder(&manager, &other, &answered, "blocked", "c");
    let new_master = deployment.server_on(new_port);
    assert_eq!(
        new_master.command(&["EXISTS", "c"]).expect("EXISTS"),
        ":1\r\n",
        "the lock is not on the new master"
    );
    blocked.finish();
}

/// A release sent while the master is down waits out the failover (within the outage grace)
/// and is answered by the new master: it frees the lock there, or finds it gone (the
/// promoted replica never got it). It does not fail for good with the lock left until its
/// lease ends.
#[test]
fn a_release_during_a_failover_is_answered_by_the_new_master() {
    let mut deployment = Deployment::start(2);
    let manager = sentinel_manager(&deployment, Duration::from_secs(30));
    let guard = manager.lock("released-in-failover").lock().expect("lock");
    // The lock reached both replicas: whichever is promoted has it.
    for replica in &deployment.servers[1..] {
        assert!(eventually(Duration::from_secs(10), || replica
            .command(&["EXISTS", "released-in-failover"])
            .is_ok_and(|reply| reply.starts_with(":1"))));
    }
    let old_port = deployment.kill_master();
    let released = guard.unlock();
    let new_port = deployment.wait_for_failover(old_port, Duration::from_secs(30));
    released.expect("the release rides out the failover");
    let new_master = deployment.server_on(new_port);
    assert_eq!(
        new_master
            .command(&["EXISTS", "released-in-failover"])
            .expect("EXISTS"),
        ":0\r\n",
        "the lock was freed on the new master"
    );
    let other = sentinel_manager(&deployment, Duration::from_secs(30));
    let taken = other
        .lock("released-in-failover")
        .try_lock()
        .expect("try_lock");
    assert!(taken.is_some(), "the released lock is free");
}

/// A master demoted by hand (no `+switch-master`, no connection killed, as Sentinel's own
/// failover kills them) refuses writes as a replica on the connections it keeps; once the
/// sentinels name another master, that refusal has the manager ask them again, also when it
/// is read behind the `WAIT` of a replica acknowledgement.
#[test]
fn a_refusal_as_a_replica_behind_a_wait_has_the_sentinels_asked_again() {
    let deployment = Deployment::start(2);
    let manager = LockManager::builder_sentinel(deployment.sentinel_urls(), MASTER_NAME)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .replica_acks(1, Duration::from_millis(500))
        .outage_grace(Duration::from_secs(60))
        .build()
        .expect("manager in sentinel mode");
    // An idle connection to the master, which the next acquisition takes.
    let lock = manager.lock("demoted-under-a-wait");
    lock.lock().unwrap().unlock().unwrap();

    let old_master = deployment.master();
    let new_master = deployment
        .servers
        .iter()
        .find(|server| server.port() != old_master.port())
        .expect("a replica");
    let new_port = new_master.port().to_string();
    assert!(new_master
        .command(&["REPLICAOF", "NO", "ONE"])
        .unwrap()
        .starts_with("+OK"));
    assert!(old_master
        .command(&["REPLICAOF", "127.0.0.1", &new_port])
        .unwrap()
        .starts_with("+OK"));
    for sentinel in &deployment.sentinels {
        let ask = |words: &[&str]| {
            let mut connection = redis::Client::open(sentinel.url())
                .unwrap()
                .get_connection()
                .unwrap();
            let mut command = redis::cmd(words[0]);
            command.arg(&words[1..]);
            command.query::<()>(&mut connection).expect("SENTINEL");
        };
        ask(&["SENTINEL", "REMOVE", MASTER_NAME]);
        ask(&[
            "SENTINEL",
            "MONITOR",
            MASTER_NAME,
            "127.0.0.1",
            &new_port,
            "2",
        ]);
    }
    assert!(eventually(Duration::from_secs(10), || deployment
        .sentinels
        .iter()
        .all(
            |sentinel| sentinel.master_port() == Some(new_master.port())
        )));
    assert!(
        eventually(Duration::from_secs(30), || new_master
            .command(&["INFO", "replication"])
            .is_ok_and(|info| info.contains("state=online"))),
        "the demoted master never followed the new one"
    );
    let started = Instant::now();
    let guard = lock
        .try_lock_for(Duration::from_secs(10))
        .expect("no error")
        .expect("granted by the new master");
    println!("granted {:?} after the demotion", started.elapsed());
    assert!(old_master
        .command(&["INFO", "errorstats"])
        .unwrap()
        .contains("errorstat_READONLY"));
    assert!(new_master
        .command(&["EXISTS", "demoted-under-a-wait"])
        .unwrap()
        .starts_with(":1"));
    guard.unlock().unwrap();
}
