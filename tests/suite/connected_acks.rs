//! Acknowledgements from the replicas connected now (`connected_replica_acks`, the default)
//! against real masters and replicas: by default a write waits for the replica a master has,
//! and for none on a master without one; a replica killed, or stalled (SIGSTOP) until its
//! acknowledgements are old, stops being waited for, and a new one is waited for once in
//! sync, without a new manager; a fixed count refuses instead; after a Sentinel failover the
//! count is the new master's.

use crate::common;
use crate::common::sentinel;

use std::time::{Duration, Instant};

use common::{eventually, RedisServer};
use redlease::{Error, LockManager};
use sentinel::{Deployment, MASTER_NAME};

/// A write's wait for its replicas: short, as every attempt a stalled replica fails costs it,
/// and long enough for a replica that keeps up on a loaded machine.
const ACK_TIMEOUT: Duration = Duration::from_millis(500);

/// Long enough for the master to stop counting a stalled replica (its acknowledgement over a
/// second old: two to three seconds) and for the manager to read the count again, on a
/// loaded machine.
const RECOUNTED: Duration = Duration::from_secs(10);

fn pair() -> (RedisServer, RedisServer) {
    RedisServer::start_with_replica()
        .expect("start a redis-server master and replica (install redis-server)")
}

/// A manager on `master` with the default acknowledgements (the replicas connected now),
/// within `ACK_TIMEOUT`.
fn manager(master: &RedisServer) -> LockManager {
    LockManager::builder(master.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .connected_replica_acks(ACK_TIMEOUT)
        .build()
        .expect("build manager")
}

/// How many `WAIT`s `server` has run.
fn waits(server: &RedisServer) -> u64 {
    let info = server.command(&["INFO", "commandstats"]).expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a count"))
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server
        .command(&["EXISTS", key])
        .expect("EXISTS")
        .starts_with(":1")
}

/// Takes and lets go of `name`, and answers how many replicas acknowledged the acquisition
/// (`Err` with the error's name when it failed).
fn acknowledged(manager: &LockManager, name: &str) -> Result<Option<u32>, String> {
    let taken = manager.lock(name).try_lock();
    let guard = taken
        .map_err(|err| common::error_name(&err))?
        .expect("a free lock");
    let acknowledged = guard.replicas_acknowledged();
    guard.unlock().map_err(|err| common::error_name(&err))?;
    Ok(acknowledged)
}

/// Waits for `lock` in a thread of its own (up to `within`), and answers how many replicas
/// acknowledged the acquisition once the thread has let it go.
fn wait_in_a_thread(
    lock: redlease::Lock,
    within: Duration,
) -> std::thread::JoinHandle<Option<u32>> {
    std::thread::spawn(move || {
        let guard = lock
            .try_lock_for(within)
            .unwrap()
            .expect("granted after the release");
        let acknowledged = guard.replicas_acknowledged();
        guard.unlock().unwrap();
        acknowledged
    })
}

/// Resumes a paused server when dropped, so that a failed test leaves no stopped process.
struct ResumeOnDrop<'a>(&'a RedisServer);

impl Drop for ResumeOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.resume();
    }
}

#[test]
fn by_default_a_write_waits_for_the_replica_the_master_has_and_for_none_without() {
    let (master, replica) = pair();
    let by_default = LockManager::builder(master.url()).build().unwrap();
    let guard = by_default.lock("connected:default").lock().unwrap();
    // The lock was granted once the replica had it: a failover now cannot lose it.
    assert!(exists(&replica, "connected:default"));
    assert_eq!(guard.replicas_acknowledged(), Some(1));
    guard.unlock().unwrap();
    assert!(
        waits(&master) >= 2,
        "the acquisition and the release waited"
    );

    let opted_out = LockManager::builder(master.url())
        .without_replica_acks()
        .build()
        .unwrap();
    let before = waits(&master);
    assert_eq!(acknowledged(&opted_out, "connected:off"), Ok(None));
    assert_eq!(waits(&master), before, "without_replica_acks sends no WAIT");

    let alone = common::server();
    let on_alone = LockManager::builder(alone.url()).build().unwrap();
    assert_eq!(acknowledged(&on_alone, "connected:alone"), Ok(None));
    let permits = on_alone.permit_semaphore("connected:permits");
    permits.try_set_permits(1).unwrap();
    permits.lock().unwrap().unlock().unwrap();
    assert_eq!(
        waits(&alone),
        0,
        "a master without replicas is sent no WAIT"
    );
}

#[test]
fn a_killed_replica_is_no_longer_waited_for_where_a_fixed_count_refuses() {
    let (master, mut replica) = pair();
    let connected = manager(&master);
    let fixed = LockManager::builder(master.url())
        .replica_acks(1, ACK_TIMEOUT)
        .build()
        .unwrap();
    assert_eq!(acknowledged(&connected, "connected:before"), Ok(Some(1)));

    replica.kill().expect("kill the replica");
    assert!(eventually(Duration::from_secs(5), || !master
        .command(&["INFO", "replication"])
        .unwrap()
        .contains("slave0:")));
    // A blocking acquisition rides out the one shortfall of the count read before the kill;
    // the count read after it is 0, and the lock is granted without waiting for anyone.
    let started = Instant::now();
    let guard = connected
        .lock("connected:after")
        .try_lock_for(RECOUNTED)
        .unwrap()
        .expect("granted once the replica is no longer counted");
    assert_eq!(guard.replicas_acknowledged(), None);
    guard.unlock().unwrap();
    println!("granted {:?} after the replica was gone", started.elapsed());
    let before = waits(&master);
    for round in 0..5 {
        let name = format!("connected:alone:{round}");
        assert_eq!(acknowledged(&connected, &name), Ok(None));
    }
    assert_eq!(
        waits(&master),
        before,
        "no WAIT while the master has no replica"
    );

    match fixed.lock("connected:fixed").try_lock() {
        Err(Error::NotReplicated {
            acknowledged: 0,
            required: 1,
            ..
        }) => {}
        other => panic!("a fixed count refuses without its replica: {other:?}"),
    }
}

#[test]
fn a_stalled_replica_is_waited_for_until_its_acknowledgements_are_old_then_again_once_back() {
    let (master, replica) = pair();
    let connected = manager(&master);
    assert_eq!(acknowledged(&connected, "connected:warm"), Ok(Some(1)));

    replica.pause().expect("SIGSTOP the replica");
    let paused = Instant::now();
    let _resume = ResumeOnDrop(&replica);
    // The master still lists it online, its last acknowledgement recent: the first tries wait
    // for it, and are refused (unless this one came so late that it no longer counts).
    match connected.lock("connected:stalled").try_lock() {
        Err(Error::NotReplicated { required: 1, .. }) => {}
        Ok(Some(guard)) if paused.elapsed() > Duration::from_secs(1) => {
            assert_eq!(guard.replicas_acknowledged(), None);
            guard.unlock().unwrap();
        }
        other => panic!("the stalled replica was waited for: {other:?}"),
    }
    let started = Instant::now();
    let guard = connected
        .lock("connected:stalled")
        .try_lock_for(RECOUNTED)
        .unwrap()
        .expect("granted once the master no longer counts the stalled replica");
    println!("granted {:?} after the stall", started.elapsed());
    assert_eq!(guard.replicas_acknowledged(), None);
    guard.unlock().unwrap();

    replica.resume().expect("SIGCONT the replica");
    assert!(
        eventually(RECOUNTED, || acknowledged(&connected, "connected:back")
            == Ok(Some(1))),
        "the replica back in sync is waited for again"
    );
}

#[test]
fn a_new_replica_is_waited_for_once_in_sync_without_a_new_manager() {
    let master = common::server();
    let connected = manager(&master);
    assert_eq!(acknowledged(&connected, "connected:alone"), Ok(None));

    let replica = RedisServer::start_replica_of(&master).expect("start a replica");
    replica
        .wait_for_master_link(Duration::from_secs(10))
        .expect("the replica in sync");
    // Once the count is read, a grant waits for the replica, which has the key while held.
    assert!(
        eventually(RECOUNTED, || {
            let Ok(Some(guard)) = connected.lock("connected:joined").try_lock() else {
                return false;
            };
            let on_replica =
                guard.replicas_acknowledged() == Some(1) && exists(&replica, "connected:joined");
            guard.unlock().is_ok() && on_replica
        }),
        "the new replica is waited for"
    );
}

#[test]
fn after_a_failover_the_count_is_the_new_masters() {
    let mut deployment = Deployment::start(2);
    let build = |builder: redlease::LockManagerBuilder| {
        builder
            .connect_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(500))
            .outage_grace(Duration::from_secs(30))
            .build()
            .expect("manager in sentinel mode")
    };
    let sentinels = deployment.sentinel_urls();
    let connected = build(LockManager::builder_sentinel(
        sentinels.clone(),
        MASTER_NAME,
    ));
    let fixed =
        build(LockManager::builder_sentinel(sentinels, MASTER_NAME).replica_acks(2, ACK_TIMEOUT));
    assert_eq!(acknowledged(&connected, "failover:before"), Ok(Some(2)));
    assert_eq!(acknowledged(&fixed, "failover:fixed:before"), Ok(Some(2)));

    // The killed master stays down: the new one has one replica.
    let old_port = deployment.kill_master();
    let new_port = deployment.wait_for_failover(old_port, Duration::from_secs(30));
    let new_master = deployment.server_on(new_port);
    assert!(eventually(Duration::from_secs(30), || new_master
        .command(&["INFO", "replication"])
        .unwrap()
        .contains("state=online")));
    // Granted by the new master, and, once its count is read, acknowledged by its one
    // replica.
    assert!(
        eventually(Duration::from_secs(30), || {
            let guard = connected.lock("failover:after").try_lock();
            let Ok(Some(guard)) = guard else {
                return false;
            };
            let acknowledged = guard.replicas_acknowledged();
            guard.unlock().is_ok() && acknowledged == Some(1)
        }),
        "the new master's one replica is waited for"
    );
    // Its first tries may still meet the old master's absence.
    let refused = Instant::now() + Duration::from_secs(30);
    loop {
        match fixed.lock("failover:fixed:after").try_lock() {
            Err(Error::NotReplicated {
                acknowledged: 1,
                required: 2,
                ..
            }) => break,
            Err(err) if err.is_transient() && Instant::now() < refused => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("a fixed count of 2 refuses with one replica left: {other:?}"),
        }
    }
}

/// A fair waiter that queued while its master had no replica, and so said it takes grants
/// inside releases, does not take one once the master has a replica: a grant is an
/// acquisition no replica acknowledged. Its next try confirms the grant behind a `WAIT`.
#[test]
fn a_fair_waiter_takes_no_unacknowledged_grant_once_the_master_has_a_replica() {
    let master = common::server();
    let holder = manager(&master);
    let waiter = manager(&master);
    let guard = holder.fair_lock("connected:fair").lock().unwrap();
    let waiting = wait_in_a_thread(waiter.fair_lock("connected:fair"), Duration::from_secs(60));
    assert!(
        eventually(Duration::from_secs(10), || master
            .command(&["HLEN", "redlease_lock_grants:{connected:fair}"])
            .is_ok_and(|reply| reply.starts_with(":1"))),
        "the waiter queued, taking grants"
    );

    let replica = RedisServer::start_replica_of(&master).expect("start a replica");
    replica
        .wait_for_master_link(Duration::from_secs(10))
        .expect("the replica in sync");
    for manager in [&holder, &waiter] {
        assert!(
            eventually(RECOUNTED, || acknowledged(manager, "connected:probe")
                == Ok(Some(1))),
            "the replica is waited for"
        );
    }
    guard.unlock().unwrap();
    assert_eq!(
        waiting.join().expect("the waiter"),
        Some(1),
        "the waiter held the lock only once its replica acknowledged it"
    );
}

/// A release hands a lock to a waiting thread of the manager inside the release only while
/// the master has no replica in sync: a handed lock would be an acquisition no replica
/// acknowledged.
#[test]
fn a_release_hands_the_lock_on_only_while_the_master_has_no_replica() {
    let alone = common::server();
    let (master, _replica) = pair();
    for (server, replicas) in [(&alone, 0), (&master, 1)] {
        let manager = manager(server);
        let lock = manager.lock("connected:handoff");
        let guard = lock.lock().unwrap();
        let waiting = wait_in_a_thread(manager.lock("connected:handoff"), Duration::from_secs(30));
        assert!(eventually(Duration::from_secs(10), || manager
            .stats()
            .waiting
            > 0));
        guard.unlock().unwrap();
        let acknowledged = waiting.join().expect("the waiter");
        let handoffs = manager.stats().handoffs;
        if replicas == 0 {
            assert_eq!((handoffs, acknowledged), (1, None), "handed on");
        } else {
            assert_eq!((handoffs, acknowledged), (0, Some(1)), "freed, then taken");
        }
    }
}
