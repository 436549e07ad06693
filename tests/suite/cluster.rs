//! Cluster mode against real Redis Clusters on loopback (three masters, with a replica each
//! where a test needs one), started by each test: locks on names spread over every master
//! exclude exactly across processes, releases wake waiters on every master, tens of
//! thousands of locks are renewed in batches per node and slot, a killed master's locks are
//! kept or reported lost (never silently doubled) once its replica takes over, a slot moved
//! while a lock in it is held takes the lock's renewal, release and waiters along, every key
//! of a name with a hash tag stays in the name's slot, and fencing and group locks work with
//! cluster managers.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::thread;
use std::time::{Duration, Instant};

use common::{assert_no_second_holder, child_role, env, eventually, run_children, BlockedTry};
use redlease::redis;
use redlease::{Error, LeaderChange, LockManager, MultiLock, RedLock};
use redlease_testing::{RedisCluster, RedisServer};

/// Starts a cluster of `masters` masters with `replicas` replicas each.
fn start(masters: usize, replicas: usize) -> RedisCluster {
    let started = Instant::now();
    let cluster = RedisCluster::start(masters, replicas)
        .expect("start a Redis Cluster (install redis-server and redis-cli)");
    println!(
        "cluster of {masters} masters and {} replicas up in {:?}",
        masters * replicas,
        started.elapsed()
    );
    cluster
}

/// A manager in cluster mode on every node of `cluster`, with short timeouts.
fn cluster_manager(cluster: &RedisCluster, watchdog: Duration) -> LockManager {
    cluster_manager_for(&cluster.seed_urls(), watchdog)
}

fn cluster_manager_for(seeds: &[String], watchdog: Duration) -> LockManager {
    LockManager::builder_cluster(seeds.iter().map(String::as_str))
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(watchdog)
        .outage_grace(Duration::from_secs(30))
        .build()
        .expect("manager in cluster mode")
}

fn connect(node: &RedisServer) -> redis::Connection {
    redis::Client::open(node.url())
        .expect("node URL")
        .get_connection()
        .expect("connect to a node")
}

/// `words` on one connection to `node`, after `prefix` (`ASKING` for a slot being imported,
/// `READONLY` for a replica).
fn after<T: redis::FromRedisValue>(node: &RedisServer, prefix: &str, words: &[&str]) -> T {
    let mut command = redis::cmd(words[0]);
    for word in &words[1..] {
        command.arg(*word);
    }
    let ((), reply): ((), T) = redis::pipe()
        .cmd(prefix)
        .add_command(command)
        .query(&mut connect(node))
        .unwrap_or_else(|err| panic!("{prefix} {words:?} on {}: {err}", node.port()));
    reply
}

/// `words` on `node`, answered as a `T`.
fn query<T: redis::FromRedisValue>(node: &RedisServer, words: &[&str]) -> T {
    let mut command = redis::cmd(words[0]);
    for word in &words[1..] {
        command.arg(*word);
    }
    command
        .query(&mut connect(node))
        .unwrap_or_else(|err| panic!("{words:?} on {}: {err}", node.port()))
}

fn exists(node: &RedisServer, key: &str) -> bool {
    query::<i64>(node, &["EXISTS", key]) == 1
}

fn pttl(node: &RedisServer, key: &str) -> i64 {
    query(node, &["PTTL", key])
}

/// The calls of the scripts run on `node` so far (`EVALSHA` and `EVAL` in
/// `INFO commandstats`).
fn script_calls(node: &RedisServer) -> u64 {
    let stats: String = query(node, &["INFO", "commandstats"]);
    ["cmdstat_evalsha:", "cmdstat_eval:"]
        .iter()
        .map(|prefix| {
            stats
                .lines()
                .find(|line| line.starts_with(prefix))
                .and_then(|line| line.split("calls=").nth(1))
                .and_then(|rest| rest.split(',').next())
                .and_then(|calls| calls.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// How many keys with a time to live `node` has (`expires=` of `INFO keyspace`).
fn keys_with_ttl(node: &RedisServer) -> u64 {
    let keyspace: String = query(node, &["INFO", "keyspace"]);
    keyspace
        .lines()
        .find(|line| line.starts_with("db0:"))
        .and_then(|line| line.split("expires=").nth(1))
        .and_then(|rest| rest.split(',').next())
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// The port of the master that serves each slot, from the masters' own slot ranges.
fn slot_owners(cluster: &RedisCluster) -> Vec<u16> {
    let mut owners = vec![0u16; 16384];
    for master in cluster.masters().unwrap() {
        for (first, last) in cluster.slots_of(master).unwrap() {
            for slot in first..=last {
                owners[usize::from(slot)] = master.port();
            }
        }
    }
    assert!(owners.iter().all(|&port| port != 0), "a slot has no master");
    owners
}

/// The shard channels anyone is subscribed to on `node`.
fn shard_channels(node: &RedisServer) -> Vec<String> {
    query(node, &["PUBSUB", "SHARDCHANNELS"])
}

// ---------------------------------------------------------------------------------------
// Names over every master: exact exclusion across processes, releases wake waiters.

const PROCESSES: usize = 4;
const THREADS: usize = 4;
const NAMES: usize = 200;
/// Rounds per thread: round `r` of thread `t` takes name `4 r + t`, in every process at once.
const ROUNDS: usize = NAMES / THREADS;

fn counted_name(index: usize) -> String {
    format!("counted:{index}")
}

/// The counter that the holders of `counted_name(index)` increment, in the name's slot.
fn counter_key(index: usize) -> String {
    format!("{{{}}}:count", counted_name(index))
}

#[test]
fn counters_on_two_hundred_names_over_three_masters_are_exact_across_processes() {
    let cluster = start(3, 1);
    let owners = slot_owners(&cluster);
    let name_owners: Vec<u16> = (0..NAMES)
        .map(|index| {
            let slot = cluster.key_slot(&counted_name(index)).unwrap();
            assert_eq!(cluster.key_slot(&counter_key(index)).unwrap(), slot);
            owners[usize::from(slot)]
        })
        .collect();
    let masters: HashSet<u16> = name_owners.iter().copied().collect();
    assert_eq!(masters.len(), 3, "the names cover every master");

    let started = Instant::now();
    let owners_env = name_owners
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",");
    run_children(
        PROCESSES,
        "cluster::cluster_counter_process",
        "cluster_count",
        &[
            ("REDLEASE_TEST_SEEDS", cluster.seed_urls().join(",")),
            ("REDLEASE_TEST_OWNERS", owners_env),
        ],
    );
    println!(
        "{} increments in {PROCESSES} processes of {THREADS} threads took {:?}",
        PROCESSES * THREADS * ROUNDS,
        started.elapsed()
    );
    // Every process took every name once, in the same round as the others.
    for (index, &port) in name_owners.iter().enumerate() {
        let owner = cluster.node(port).unwrap();
        let count: Option<u64> = query(owner, &["GET", &counter_key(index)]);
        assert_eq!(
            count,
            Some(PROCESSES as u64),
            "counter of {}",
            counted_name(index)
        );
        assert!(!exists(owner, &counted_name(index)), "a lock was left");
    }
    for master in cluster.masters().unwrap() {
        assert!(
            eventually(Duration::from_secs(5), || shard_channels(master).is_empty()),
            "shard channels left on {}: {:?}",
            master.port(),
            shard_channels(master)
        );
    }
}

/// Child side of the test above: threads that GET and SET the counters of the names under
/// their locks, talking to each name's master directly.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn cluster_counter_process() {
    if child_role().as_deref() != Some("cluster_count") {
        return;
    }
    let seeds: Vec<String> = env("REDLEASE_TEST_SEEDS")
        .split(',')
        .map(str::to_owned)
        .collect();
    let owners: Vec<u16> = env("REDLEASE_TEST_OWNERS")
        .split(',')
        .map(|port| port.parse().unwrap())
        .collect();
    let manager = cluster_manager_for(&seeds, Duration::from_secs(5));
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let manager = manager.clone();
            let owners = owners.clone();
            thread::spawn(move || {
                let mut connections: HashMap<u16, redis::Connection> = HashMap::new();
                for round in 0..ROUNDS {
                    let index = round * THREADS + thread;
                    let port = owners[index];
                    let connection = connections.entry(port).or_insert_with(|| {
                        redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                            .unwrap()
                            .get_connection()
                            .unwrap()
                    });
                    let guard = manager.lock(&counted_name(index)).lock().unwrap();
                    let value: Option<u64> = redis::cmd("GET")
                        .arg(counter_key(index))
                        .query(connection)
                        .unwrap();
                    thread::yield_now();
                    let () = redis::cmd("SET")
                        .arg(counter_key(index))
                        .arg(value.unwrap_or(0) + 1)
                        .query(connection)
                        .unwrap();
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(manager.watched_locks(), 0);
    assert!(eventually(Duration::from_secs(5), || manager
        .subscribed_channels()
        == 0));
}

#[test]
fn a_release_wakes_a_waiter_on_every_master_long_before_the_lease() {
    let cluster = start(3, 0);
    let owners = slot_owners(&cluster);
    // One name per master.
    let mut names: HashMap<u16, String> = HashMap::new();
    for index in 0.. {
        let name = format!("wake:{index}");
        let owner = owners[usize::from(cluster.key_slot(&name).unwrap())];
        names.entry(owner).or_insert(name);
        if names.len() == 3 {
            break;
        }
    }
    let lease = Duration::from_secs(30);
    let holder = cluster_manager(&cluster, lease);
    let waiter = cluster_manager(&cluster, lease);
    let guards: HashMap<u16, _> = names
        .iter()
        .map(|(&port, name)| (port, holder.lock(name).lock().unwrap()))
        .collect();
    let (taken, taken_at) = crossbeam_channel::unbounded();
    let waiting: Vec<_> = names
        .iter()
        .map(|(&port, name)| {
            let waiter = waiter.clone();
            let name = name.clone();
            let taken = taken.clone();
            thread::spawn(move || {
                let guard = waiter.lock(&name).lock().unwrap();
                taken.send((port, Instant::now())).unwrap();
                guard.unlock().unwrap();
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(10), || waiter.stats().waiting == 3),
        "the waiters wait"
    );
    // Each waiter listens on its shard channel at the master of its name.
    for (&port, name) in &names {
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let master = cluster.node(port).unwrap();
        assert!(
            eventually(Duration::from_secs(5), || shard_channels(master)
                .contains(&channel)),
            "no shard subscription to {channel} on {port}: {:?}",
            shard_channels(master)
        );
    }

    for (port, guard) in guards {
        let released_at = Instant::now();
        guard.unlock().unwrap();
        let (woken_port, woken_at) = taken_at
            .recv_timeout(Duration::from_secs(20))
            .expect("the waiter takes the lock");
        assert_eq!(woken_port, port);
        let wake = woken_at.duration_since(released_at);
        println!("waiter on master {port} woken {wake:?} after the release");
        assert!(
            wake < Duration::from_secs(5),
            "woken {wake:?} after the release, not by it (lease {lease:?})"
        );
    }
    for waiting in waiting {
        waiting.join().unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Renewals in batches per node and slot.

#[test]
fn thirty_thousand_locks_are_renewed_in_batches_per_master() {
    // Most locks share a few hundred hash tags; some have slots of their own.
    const TENANTS: usize = 330;
    const JOBS: usize = 90;
    const PLAIN: usize = 300;
    const TAKERS: usize = 6;
    let cluster = start(3, 0);
    let owners = slot_owners(&cluster);
    // One watchdog thread renews every lock once an interval (a third of the lease), and
    // gives a lock up when its renewal is more than two intervals late. It shares the cores
    // with the takers and the three masters: at a lease of 1.5 s (60 000 renewals a second,
    // a second to spare) it lost thousands of locks on two loaded cores, waiting for a core
    // through most of each batch. At 6 s: 15 000 a second, four seconds to spare.
    let watchdog = Duration::from_secs(6);
    let manager = cluster_manager(&cluster, watchdog);

    // Tenant by tenant (the locks of one slot are taken together, so they fall due together),
    // then names of their own slots.
    let mut names: Vec<String> = (0..TENANTS)
        .flat_map(|tenant| (0..JOBS).map(move |job| format!("{{tenant-{tenant}}}:job-{job}")))
        .collect();
    names.extend((0..PLAIN).map(|index| format!("plain-{index}")));
    let total = names.len();
    assert_eq!(total, 30_000);
    let mut locks_per_master: HashMap<u16, u64> = HashMap::new();
    for tenant in 0..TENANTS {
        let slot = cluster.key_slot(&format!("{{tenant-{tenant}}}")).unwrap();
        *locks_per_master
            .entry(owners[usize::from(slot)])
            .or_default() += JOBS as u64;
    }
    for index in 0..PLAIN {
        let slot = cluster.key_slot(&format!("plain-{index}")).unwrap();
        *locks_per_master
            .entry(owners[usize::from(slot)])
            .or_default() += 1;
    }
    assert_eq!(locks_per_master.len(), 3);

    let started = Instant::now();
    let (taken, all_taken) = crossbeam_channel::unbounded();
    // Dropped to tell the takers to release their locks.
    let (release, released) = crossbeam_channel::bounded::<()>(0);
    let takers: Vec<_> = names
        .chunks(total.div_ceil(TAKERS))
        .map(|chunk| {
            let chunk = chunk.to_vec();
            let manager = manager.clone();
            let (taken, released) = (taken.clone(), released.clone());
            thread::spawn(move || {
                let guards: Vec<_> = chunk
                    .iter()
                    .map(|name| manager.lock(name).lock().unwrap())
                    .collect();
                taken.send(guards.len()).unwrap();
                let _ = released.recv();
                let lost = guards.iter().filter(|guard| guard.is_lost()).count();
                drop(guards);
                lost
            })
        })
        .collect();
    let mut held = 0;
    for _ in 0..takers.len() {
        held += all_taken
            .recv_timeout(Duration::from_secs(120))
            .expect("a taker took its locks");
    }
    assert_eq!(held, total);
    println!("{total} locks taken in {:?}", started.elapsed());
    assert_eq!(
        manager.watched_locks(),
        total,
        "locks given up while taking: {:?}",
        manager.stats()
    );

    let masters = cluster.masters().unwrap();
    let calls_before: Vec<u64> = masters.iter().map(|master| script_calls(master)).collect();
    let stats_before = manager.stats();
    // Three rounds of renewals of every lock, one a renewal interval: a lease's worth.
    let rounds = 3;
    assert!(
        eventually(Duration::from_secs(30), || manager.stats().renewals_sent
            >= stats_before.renewals_sent + rounds * total as u64),
        "renewals sent: {} after {}: {:?}",
        manager.stats().renewals_sent,
        stats_before.renewals_sent,
        manager.stats()
    );
    let stats_after = manager.stats();
    let renewed_rounds =
        (stats_after.renewals_sent - stats_before.renewals_sent) as f64 / total as f64;
    for (master, before) in masters.iter().zip(&calls_before) {
        let calls = script_calls(master) - before;
        let locks = locks_per_master[&master.port()];
        let renewals = locks as f64 * renewed_rounds;
        println!(
            "master {}: {locks} locks, about {renewals:.0} renewals in {calls} script calls",
            master.port()
        );
        assert!(calls > 0, "nothing was renewed on {}", master.port());
        assert!(
            (calls as f64) < renewals / 10.0,
            "master {}: {calls} script calls for {renewals:.0} renewals: not batched",
            master.port()
        );
        // Every lock of the master is still there, with its lease.
        assert_eq!(
            keys_with_ttl(master),
            locks,
            "locks alive on {}",
            master.port()
        );
    }
    println!(
        "{} renewals in {} batches",
        stats_after.renewals_sent - stats_before.renewals_sent,
        stats_after.renewal_batches - stats_before.renewal_batches
    );
    assert_eq!(stats_after.lost_not_held_anymore, 0);
    assert_eq!(stats_after.lost_lease_expired, 0);

    drop(release);
    let lost: usize = takers.into_iter().map(|taker| taker.join().unwrap()).sum();
    assert_eq!(lost, 0, "locks were lost");
    assert_eq!(manager.watched_locks(), 0);
    // Nothing left with a lease, release latches included (deleted within an interval).
    for master in &masters {
        assert!(
            eventually(Duration::from_secs(30), || keys_with_ttl(master) == 0),
            "{} locks or latches left on {}",
            keys_with_ttl(master),
            master.port()
        );
    }
}

// ---------------------------------------------------------------------------------------
// A master killed: its replica takes over.

#[test]
fn after_a_master_is_killed_its_locks_are_kept_or_reported_lost_never_silently_doubled() {
    let mut cluster = start(3, 1);
    let watchdog = Duration::from_secs(3);
    let (report, reports) = crossbeam_channel::unbounded();
    let holder = LockManager::builder_cluster(cluster.seed_urls())
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(watchdog)
        .outage_grace(Duration::from_secs(30))
        .on_lost_lock(move |lost| {
            let _ = report.send((lost.name.clone(), Instant::now()));
        })
        .build()
        .expect("manager in cluster mode");
    // Holds with a long lease: kept through the failover for sure, so that their release
    // must wake their waiter through the new master's pub/sub.
    let long_holder = cluster_manager(&cluster, Duration::from_secs(30));
    let waiter = cluster_manager(&cluster, Duration::from_secs(30));

    let victim_slot = cluster.key_slot("{victim}").unwrap();
    let victim = cluster.master_of_slot(victim_slot).unwrap();
    let victim_port = victim.port();
    let replica_port = cluster.replicas_of(victim).unwrap()[0].port();
    let owners = slot_owners(&cluster);
    // Names on the master to be killed: two share its hash tag, three have slots of their own.
    let mut names = vec!["{victim}:a".to_owned(), "{victim}:b".to_owned()];
    names.extend(
        (0..)
            .map(|index| format!("held-{index}"))
            .filter(|name| owners[usize::from(cluster.key_slot(name).unwrap())] == victim_port)
            .take(3),
    );
    let elsewhere = (0..)
        .map(|index| format!("elsewhere-{index}"))
        .find(|name| owners[usize::from(cluster.key_slot(name).unwrap())] != victim_port)
        .unwrap();
    let long_name = "{victim}:long";

    let guards: Vec<_> = names
        .iter()
        .map(|name| holder.lock(name).lock().unwrap())
        .collect();
    let elsewhere_guard = holder.lock(&elsewhere).lock().unwrap();
    let long_guard = long_holder.lock(long_name).lock().unwrap();
    // The replica has every key before the kill.
    let replica = cluster.node(replica_port).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || names
            .iter()
            .map(String::as_str)
            .chain([long_name])
            .all(
                |name| after::<i64>(replica, "READONLY", &["EXISTS", name]) == 1
            )),
        "the replica has the held locks"
    );

    // A waiter on every held name.
    let (taken, taken_at) = crossbeam_channel::unbounded();
    let waiting: Vec<_> = names
        .iter()
        .map(String::as_str)
        .chain([long_name])
        .map(|name| {
            let waiter = waiter.clone();
            let name = name.to_owned();
            let taken = taken.clone();
            thread::spawn(move || {
                let outcome = waiter.lock(&name).lock().map(|guard| {
                    let at = Instant::now();
                    drop(guard);
                    at
                });
                taken.send((name, outcome)).unwrap();
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(10), || waiter.stats().waiting
            == names.len() + 1),
        "the waiters wait"
    );

    let killed = cluster.kill_master_of_slot(victim_slot).unwrap();
    assert_eq!(killed, victim_port);
    let killed_at = Instant::now();
    // A lock asked for during the failover is granted after it.
    let during = thread::spawn({
        let holder = holder.clone();
        move || {
            let guard = holder
                .lock("{victim}:asked-during")
                .try_lock_for(Duration::from_secs(20))?;
            let after_kill = killed_at.elapsed();
            if let Some(guard) = guard {
                guard.unlock()?;
                Ok::<_, Error>(Some(after_kill))
            } else {
                Ok(None)
            }
        }
    });
    let promoted = cluster
        .wait_for_failover(victim_slot, Duration::from_secs(20))
        .expect("the replica takes over");
    assert_eq!(promoted.port(), replica_port);
    println!("failover settled {:?} after the kill", killed_at.elapsed());
    let granted_after = during
        .join()
        .unwrap()
        .expect("a lock asked for during the failover")
        .expect("is granted once the replica took over");
    println!("a lock asked for during the failover was granted {granted_after:?} after the kill");
    assert!(granted_after < Duration::from_secs(15), "{granted_after:?}");
    let started = Instant::now();
    let fresh = holder
        .lock("{victim}:after")
        .try_lock_for(Duration::from_secs(15))
        .unwrap()
        .expect("the promoted master grants a free lock");
    println!("first lock after the failover: {:?}", started.elapsed());
    fresh.unlock().unwrap();

    // Every held lock is renewed on the promoted master, or reported lost.
    let before = holder.stats().renewals_sent;
    assert!(
        eventually(Duration::from_secs(15), || {
            let kept = guards.iter().filter(|guard| !guard.is_lost()).count() as u64;
            holder.stats().renewals_sent >= before + 2 * (kept + 1)
        }),
        "the held locks were neither renewed nor reported lost"
    );
    assert!(
        !elsewhere_guard.is_lost(),
        "a lock on another master was lost: {:?}",
        elsewhere_guard.check()
    );
    let mut lost_at: HashMap<String, Instant> = HashMap::new();
    for (name, guard) in names.iter().zip(&guards) {
        if guard.is_lost() {
            while !lost_at.contains_key(name) {
                let (reported, at) = reports
                    .recv_timeout(Duration::from_secs(5))
                    .unwrap_or_else(|_| panic!("the loss of {name} is not reported"));
                lost_at.entry(reported).or_insert(at);
            }
            println!("{name}: reported lost ({:?})", guard.check());
        } else {
            guard.check().unwrap();
            assert!(
                exists(promoted, name),
                "{name} is held but not on the new master"
            );
            let left = pttl(promoted, name);
            assert!(
                left > watchdog.as_millis() as i64 / 2,
                "{name} is held but not renewed on the new master: PTTL {left}"
            );
            println!("{name}: kept, renewed on the new master");
        }
    }
    assert!(
        exists(promoted, long_name),
        "a 30 s lease was lost in a failover"
    );

    // Release what is still held; each waiter takes its lock, never while the holder holds.
    let mut released_at: HashMap<String, Instant> = HashMap::new();
    for (name, guard) in names.iter().zip(guards) {
        if !guard.is_lost() {
            released_at.insert(name.clone(), Instant::now());
        }
        drop(guard);
    }
    released_at.insert(long_name.to_owned(), Instant::now());
    long_guard.unlock().unwrap();
    let mut acquired_at: HashMap<String, Instant> = HashMap::new();
    for _ in 0..=names.len() {
        let (name, outcome) = taken_at
            .recv_timeout(Duration::from_secs(30))
            .expect("every waiter takes its lock");
        acquired_at.insert(name, outcome.expect("the waiter's lock"));
    }
    for waiting in waiting {
        waiting.join().unwrap();
    }
    for name in names.iter().map(String::as_str).chain([long_name]) {
        let acquired = acquired_at[name];
        match (released_at.get(name), lost_at.get(name)) {
            (Some(&released), _) => {
                assert!(
                    acquired >= released,
                    "{name}: the waiter took it {:?} before the holder released it",
                    released - acquired
                );
                let wake = acquired - released;
                println!("{name}: the waiter took it {wake:?} after the release");
                assert!(wake < Duration::from_secs(5), "{name}: woken {wake:?} late");
            }
            (None, Some(&lost)) => {
                // Both may have believed they held it only until the holder's next renewal
                // told it: never silently.
                if lost > acquired {
                    println!("{name}: held by both for {:?}", lost - acquired);
                }
                assert!(
                    lost <= acquired + watchdog / 3 + Duration::from_secs(1),
                    "{name}: the holder was told of its loss {:?} after the waiter took it",
                    lost - acquired
                );
            }
            (None, None) => panic!("{name}: neither released nor reported lost"),
        }
    }
    elsewhere_guard.unlock().unwrap();
}

// ---------------------------------------------------------------------------------------
// A slot moved while a lock in it is held.

#[test]
fn a_slot_moved_under_a_held_lock_takes_its_renewal_release_and_waiters_along() {
    let cluster = start(3, 0);
    let watchdog = Duration::from_millis(1500);
    let holder = cluster_manager(&cluster, watchdog);
    let long_holder = cluster_manager(&cluster, Duration::from_secs(30));
    let waiter = cluster_manager(&cluster, Duration::from_secs(30));
    let short_name = "{moving}:short";
    let long_name = "{moving}:long";
    let slot = cluster.key_slot(short_name).unwrap();
    assert_eq!(cluster.key_slot(long_name).unwrap(), slot);
    let source = cluster.master_of_slot(slot).unwrap();
    let target = *cluster
        .masters()
        .unwrap()
        .iter()
        .find(|master| master.port() != source.port())
        .unwrap();

    // The short lease is held on a thread of its own, which releases it when asked: the
    // release may have to wait for the migration to finish.
    let (held, short_taken) = crossbeam_channel::bounded(1);
    let (ask_release, release_asked) = crossbeam_channel::bounded::<()>(1);
    let short_holder = thread::spawn({
        let holder = holder.clone();
        move || {
            let guard = holder.lock(short_name).lock().unwrap();
            held.send(()).unwrap();
            let _ = release_asked.recv();
            guard.unlock()
        }
    });
    short_taken
        .recv_timeout(Duration::from_secs(10))
        .expect("the short lease is taken");
    let long_guard = long_holder.lock(long_name).lock().unwrap();
    let (taken, taken_at) = crossbeam_channel::unbounded();
    let waiting: Vec<_> = [short_name, long_name]
        .into_iter()
        .map(|name| {
            let waiter = waiter.clone();
            let taken = taken.clone();
            thread::spawn(move || {
                let guard = waiter.lock(name).lock().unwrap();
                taken.send((name, Instant::now())).unwrap();
                guard.unlock().unwrap();
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(10), || waiter.stats().waiting == 2),
        "the waiters wait"
    );
    let renewed = |rounds: u64| {
        let before = holder.stats().renewals_sent;
        eventually(Duration::from_secs(10), || {
            holder.stats().renewals_sent >= before + rounds
        })
    };
    let nothing_lost = || {
        let stats = holder.stats();
        stats.lost_not_held_anymore + stats.lost_lease_expired == 0
    };

    let migration = cluster.begin_migration(slot, target).unwrap();
    // MIGRATING, with the key still on the source: renewed there, past several leases.
    assert!(renewed(6), "no renewals while the slot is migrating");
    assert!(nothing_lost());
    assert!(exists(source, short_name));
    assert!(pttl(source, short_name) > 500, "not renewed on the source");

    // The keys move: the renewals follow them (ASK), past several leases again.
    assert!(migration.move_keys().unwrap() >= 2, "the two locks moved");
    let moved_at = Instant::now();
    assert!(renewed(6), "no renewals after the key moved");
    assert!(moved_at.elapsed() > watchdog, "renewed past a whole lease");
    assert!(nothing_lost());
    assert_eq!(
        after::<i64>(target, "ASKING", &["EXISTS", short_name]),
        1,
        "the lock outlived its lease on the target: renewed there"
    );
    let left: i64 = after(target, "ASKING", &["PTTL", short_name]);
    assert!(left > 500, "not renewed on the target: PTTL {left}");

    // Released while the slot is half moved. A script on keys of the slot that are not all
    // on one node (the release's latch key is new) is answered TRYAGAIN until the migration
    // ends: the release is done by then.
    let released_at = Instant::now();
    ask_release.send(()).unwrap();
    let short_holder = match short_holder.join_within(Duration::from_millis(300)) {
        Ok(released) => {
            released.expect("a release during the migration");
            println!("released during the migration");
            None
        }
        Err(short_holder) => Some(short_holder),
    };
    migration.finish().unwrap();
    assert_eq!(cluster.master_of_slot(slot).unwrap().port(), target.port());
    if let Some(short_holder) = short_holder {
        short_holder
            .join_within(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("the release did not end after the migration"))
            .expect("a release asked for during the migration, done after it");
        println!(
            "released {:?} after the release was asked for, once the migration ended",
            released_at.elapsed()
        );
    }
    let (name, woken_at) = taken_at
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter on the released lock takes it");
    assert_eq!(name, short_name);
    println!(
        "waiter on the short lease woken {:?} after the release was asked for",
        woken_at - released_at
    );

    // The slot is the target's now; the long lease's waiter moved with it.
    assert!(exists(target, long_name));
    assert!(
        eventually(Duration::from_secs(10), || shard_channels(target)
            .contains(&format!("redisson_lock__channel:{long_name}"))),
        "the waiter's subscription did not move to the target: {:?}",
        shard_channels(target)
    );
    let released_at = Instant::now();
    long_guard.unlock().expect("a release after the migration");
    let (name, woken_at) = taken_at
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiter on the long lease takes it");
    assert_eq!(name, long_name);
    let wake = woken_at - released_at;
    println!("waiter woken {wake:?} after a release on the new owner");
    assert!(
        wake < Duration::from_secs(5),
        "woken {wake:?} after the release: not by it (lease 30 s)"
    );
    for waiting in waiting {
        waiting.join().unwrap();
    }
    // Released by the holders, then taken and released by the waiters (a waiter may take a
    // lock before its key could be seen gone, so this is looked at once they are done).
    assert!(!exists(target, short_name), "released: the key is gone");
    assert!(!exists(target, long_name), "released: the key is gone");
    // The holder's next lock in the slot goes to the target straight away.
    let again = holder.lock(short_name).lock().unwrap();
    assert!(exists(target, short_name));
    again.unlock().unwrap();
    assert!(nothing_lost());
}

/// Joining a thread with a time limit.
trait JoinWithin<T>: Sized {
    /// The thread's result if it ends within `within` (its panic goes on here), else the
    /// handle back.
    fn join_within(self, within: Duration) -> Result<T, Self>;
}

impl<T> JoinWithin<T> for thread::JoinHandle<T> {
    fn join_within(self, within: Duration) -> Result<T, Self> {
        if eventually(within, || self.is_finished()) {
            Ok(self
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        } else {
            Err(self)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Names with braces.

#[test]
fn every_key_of_a_name_with_a_hash_tag_is_in_the_name_slot() {
    let cluster = start(3, 0);
    let manager = cluster_manager(&cluster, Duration::from_secs(30));
    let other = cluster_manager(&cluster, Duration::from_secs(30));
    // One hash tag per primitive, in front, inside or twice.
    let lock_name = "{tenant-1}:job";
    let fair_name = "orders:{tenant-2}:fair";
    let rw_name = "{tenant-3}{x}:rw";
    let semaphore_name = "{tenant-4}:pool";
    let permits_name = "sem{tenant-5}";
    let latch_name = "{tenant-6}:latch";
    let fenced_name = "{tenant-7}:balance";

    let guard = manager.lock(lock_name).lock().unwrap();
    let inner = manager.lock(lock_name).lock().unwrap();
    let fair = manager.fair_lock(fair_name).lock().unwrap();
    // A waiter in line puts the fair lock's queue and its timeouts in place.
    let in_line = thread::spawn({
        let other = other.clone();
        move || {
            other
                .fair_lock(fair_name)
                .try_lock_for(Duration::from_secs(60))
                .unwrap()
                .map(drop)
                .is_some()
        }
    });
    assert!(eventually(Duration::from_secs(10), || other
        .stats()
        .waiting
        == 1));
    let rw = manager.read_write_lock(rw_name);
    let read = rw.read().lock().unwrap();
    let read_again = rw.read().lock().unwrap();
    let semaphore = manager.semaphore(semaphore_name);
    assert!(semaphore.try_set_permits(3).unwrap());
    assert!(semaphore.try_acquire(1).unwrap());
    let permits = manager.permit_semaphore(permits_name);
    assert!(permits.try_set_permits(2).unwrap());
    let permit = permits.lock().unwrap();
    // A latch's channel wraps its name in braces once more (Redisson's rule), which moves a
    // name with a tag to another slot: the latch works, or is refused in words, never with
    // a raw CROSSSLOT.
    let latch = manager.count_down_latch(latch_name);
    let latch_works = match latch.try_set_count(2) {
        Ok(set) => {
            assert!(set);
            latch.count_down().unwrap();
            true
        }
        Err(Error::InvalidArgument(why)) => {
            println!("a latch named {latch_name:?} is refused: {why}");
            false
        }
        Err(other) => panic!("latch {latch_name:?}: {other:?}"),
    };
    let store = manager.fenced_store(fenced_name);
    store.set(guard.fencing_token(), "42").unwrap();

    let names = [
        lock_name,
        fair_name,
        rw_name,
        semaphore_name,
        permits_name,
        latch_name,
        fenced_name,
    ];
    let mut keys_seen: HashMap<&str, Vec<String>> = HashMap::new();
    for master in cluster.masters().unwrap() {
        let keys: Vec<String> = query(master, &["KEYS", "*"]);
        for key in keys {
            let name = names
                .iter()
                .find(|name| key.contains(*name))
                .unwrap_or_else(|| panic!("a key of no name: {key}"));
            let slot = cluster.key_slot(&key).unwrap();
            assert_eq!(
                slot,
                cluster.key_slot(name).unwrap(),
                "{key}, a key of {name}, is in another slot"
            );
            assert_eq!(cluster.master_of_slot(slot).unwrap().port(), master.port());
            keys_seen.entry(name).or_default().push(key);
        }
    }
    println!("{keys_seen:#?}");
    for name in names {
        if name == latch_name && !latch_works {
            continue;
        }
        let keys = keys_seen.get(name).cloned().unwrap_or_default();
        assert!(
            keys.contains(&name.to_owned()),
            "{name} has no key: {keys:?}"
        );
    }
    // The layout of ../shared/PROTOCOL.md: tokens, the fair lock's queue, read levels, permit
    // timeouts, the fence.
    let has = |name: &str, key: &str| keys_seen[name].iter().any(|seen| seen == key);
    assert!(has(lock_name, "redisson_lock_token:{tenant-1}:job"));
    assert!(has(fair_name, "redisson_lock_queue:orders:{tenant-2}:fair"));
    assert!(has(
        fair_name,
        "redisson_lock_timeout:orders:{tenant-2}:fair"
    ));
    assert!(keys_seen[rw_name]
        .iter()
        .any(|key| key.starts_with("{tenant-3}{x}:rw:") && key.ends_with(":rwlock_timeout:2")));
    assert!(has(permits_name, "sem{tenant-5}:timeout"));
    assert!(has(fenced_name, "redlease_fence:{tenant-7}:balance"));

    drop((inner, read_again, read));
    guard.unlock().unwrap();
    fair.unlock().unwrap();
    assert!(
        in_line.join().unwrap(),
        "the fair lock's next in line took it"
    );
    permit.unlock().unwrap();
    semaphore.release(1).unwrap();
    if latch_works {
        latch.count_down().unwrap();
        assert!(latch.wait_for(Duration::from_secs(5)).unwrap());
    }
}

#[test]
fn a_name_whose_keys_would_fall_in_different_slots_is_refused_with_a_typed_error() {
    let cluster = start(3, 0);
    let manager = cluster_manager(&cluster, Duration::from_secs(30));
    // An unclosed brace, an empty tag, a closing brace alone: the lock's key is hashed whole,
    // its derived keys by a tag.
    for name in ["a{b", "{}job", "a}b"] {
        let refused = manager.lock(name).try_lock();
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "lock {name:?}: {refused:?}"
        );
        let refused = manager.fair_lock(name).try_lock();
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "fair lock {name:?}: {refused:?}"
        );
        let refused = manager.read_write_lock(name).write().try_lock();
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "write lock {name:?}: {refused:?}"
        );
        let refused = manager.fenced_store(name).set(1, "x");
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "fenced store {name:?}: {refused:?}"
        );
    }
    // Nothing was written.
    for master in cluster.masters().unwrap() {
        assert_eq!(query::<i64>(master, &["DBSIZE"]), 0);
    }
    // The same names on a single server are fine.
    let single = common::server();
    let manager = common::manager(&single, Duration::from_secs(30));
    manager.lock("a{b").lock().unwrap().unlock().unwrap();
}

// ---------------------------------------------------------------------------------------
// Fencing and group locks.

#[test]
fn fenced_stores_and_group_locks_work_with_cluster_managers() {
    let cluster = start(3, 0);
    let owners = slot_owners(&cluster);
    let manager = cluster_manager(&cluster, Duration::from_millis(1500));
    let rival = cluster_manager(&cluster, Duration::from_millis(1500));

    // A fenced store next to its lock, in one slot: an older holder's write is refused.
    let lock = manager.lock("{account-9}:lock");
    let store = manager.fenced_store("{account-9}:balance");
    let first = lock.lock().unwrap();
    let stale = first.fencing_token();
    store.set(stale, "100").unwrap();
    first.unlock().unwrap();
    let second = rival.lock("{account-9}:lock").lock().unwrap();
    assert!(second.fencing_token() > stale);
    rival
        .fenced_store("{account-9}:balance")
        .set(second.fencing_token(), "120")
        .unwrap();
    assert!(matches!(
        store.set(stale, "late"),
        Err(Error::StaleToken { .. })
    ));
    assert_eq!(store.get::<u32>().unwrap(), Some(120));
    assert_eq!(store.highest_token().unwrap(), second.fencing_token());
    // Guarded writes: keys with the lock's hash tag go to its node; others are refused
    // before anything is sent.
    let mut balance = redlease::Writes::new();
    balance.increment_by("{account-9}:audit", 1);
    assert_eq!(
        second.guarded_write(&balance).unwrap(),
        [redis::Value::Int(1)]
    );
    let mut elsewhere = redlease::Writes::new();
    elsewhere.set("account-9:audit", "x");
    match second.guarded_write(&elsewhere) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("{account-9}"), "{why}"),
        other => panic!("a key outside the lock's slot: {other:?}"),
    }
    let audit_owner = cluster.master_of_key("{account-9}:audit").unwrap();
    assert_eq!(query::<i64>(audit_owner, &["GET", "{account-9}:audit"]), 1);
    assert!(!exists(
        cluster.master_of_key("account-9:audit").unwrap(),
        "account-9:audit"
    ));
    let owner = cluster.master_of_key("{account-9}:balance").unwrap();
    assert!(exists(owner, "redlease_fence:{account-9}:balance"));
    second.unlock().unwrap();
    // A plain name: its fence key has the name as tag.
    let plain = manager.fenced_store("balance");
    plain.set(3, "x").unwrap();
    assert_eq!(plain.get::<String>().unwrap().as_deref(), Some("x"));
    assert!(exists(
        cluster.master_of_key("balance").unwrap(),
        "redlease_fence:{balance}"
    ));

    // A multi-lock over names on all three masters: all or nothing, renewed past its lease.
    let mut spread: HashMap<u16, String> = HashMap::new();
    for index in 0.. {
        let name = format!("multi-{index}");
        spread
            .entry(owners[usize::from(cluster.key_slot(&name).unwrap())])
            .or_insert(name);
        if spread.len() == 3 {
            break;
        }
    }
    let names: Vec<&String> = spread.values().collect();
    let multi = MultiLock::new(names.iter().map(|name| manager.lock(name.as_str()))).unwrap();
    let guard = multi.lock().unwrap();
    assert_eq!(guard.held_members(), 3);
    let before = manager.stats().renewals_sent;
    assert!(eventually(Duration::from_secs(10), || manager
        .stats()
        .renewals_sent
        >= before + 3 * 4));
    guard.check().unwrap();
    for name in &names {
        assert!(rival.lock(name.as_str()).try_lock().unwrap().is_none());
    }
    guard.unlock().unwrap();
    // One member taken by someone else: nothing is held.
    let blocker = rival.lock(names[1].as_str()).lock().unwrap();
    assert!(multi.try_lock().unwrap().is_none());
    for name in [names[0], names[2]] {
        assert!(
            !manager.lock(name.as_str()).is_locked().unwrap(),
            "{name} was left held"
        );
    }
    blocker.unlock().unwrap();

    // A Redlock whose members are a cluster and two single servers.
    let singles = [common::server(), common::server()];
    let mut members = vec![cluster_manager(&cluster, Duration::from_secs(30))];
    members.extend(
        singles
            .iter()
            .map(|single| common::manager(single, Duration::from_secs(30))),
    );
    let redlock = RedLock::from_managers(&members, "{report}:daily").unwrap();
    let guard = redlock.lock().unwrap();
    assert_eq!(guard.held_members(), 3);
    assert!(exists(
        cluster.master_of_key("{report}:daily").unwrap(),
        "{report}:daily"
    ));
    let rival_members = vec![
        cluster_manager(&cluster, Duration::from_secs(30)),
        common::manager(&singles[0], Duration::from_secs(30)),
        common::manager(&singles[1], Duration::from_secs(30)),
    ];
    let rival_redlock = RedLock::from_managers(&rival_members, "{report}:daily").unwrap();
    assert!(rival_redlock.try_lock().unwrap().is_none());
    guard.unlock().unwrap();
    let guard = rival_redlock
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("free again");
    guard.unlock().unwrap();
    assert!(!exists(
        cluster.master_of_key("{report}:daily").unwrap(),
        "{report}:daily"
    ));
}

/// A call blocked on a frozen master through its failover is answered once the old master
/// wakes, still a master in its own eyes until the cluster tells it otherwise. Neither that
/// answer nor its connection may be trusted: a lock granted there is invisible to every
/// manager that follows the cluster, so two holders would hold it at once.
#[test]
fn a_connection_to_a_demoted_master_is_never_used_again() {
    let cluster = start(3, 1);
    let seeds = cluster.seed_urls();
    // A call stays blocked on the frozen master through the failover (response timeout), and
    // the renewal of a held lock fails (at its lease's end) well after it: that failure makes
    // the manager ask the cluster for its map again. (Without replica acknowledgements: the
    // thread that counts the replicas would find the frozen master first, and have the map
    // read again before any renewal failed.)
    let manager = LockManager::builder_cluster(seeds.iter().map(String::as_str))
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(60))
        .watchdog_timeout(Duration::from_secs(30))
        .outage_grace(Duration::from_secs(30))
        .without_replica_acks()
        .build()
        .expect("manager in cluster mode");
    let _held = manager.lock("{t}held").lock().expect("lock");
    let slot = cluster.key_slot("{t}").unwrap();
    let old_master = cluster.master_of_slot(slot).unwrap();
    let promoted = cluster.replicas_of(old_master).unwrap()[0];
    // The held lock is on the replica that takes over.
    assert!(eventually(Duration::from_secs(10), || after::<i64>(
        promoted,
        "READONLY",
        &["EXISTS", "{t}held"]
    ) == 1));

    old_master.pause().expect("SIGSTOP the master");
    let blocked = BlockedTry::start(&manager, "{t}blocked");
    assert!(
        eventually(Duration::from_secs(30), || promoted
            .command(&["ROLE"])
            .is_ok_and(|role| role.contains("master"))),
        "the replica never took over"
    );
    assert!(
        eventually(Duration::from_secs(60), || manager.stats().renewals_failed
            > 0),
        "the renewal on the frozen master never failed"
    );
    old_master.resume().expect("SIGCONT the old master");
    let answered = blocked.answered(Duration::from_secs(90));
    let other = cluster_manager_for(&seeds, Duration::from_secs(9));
    // The old master may still take writes until it hears of the failover: a lock taken now
    // must be taken on the new master, where every other manager looks.
    let _first = assert_no_second_holder(&manager, &other, &answered, "{t}blocked", "{t}c");
    assert!(
        exists(promoted, "{t}c"),
        "the lock is not on the new master"
    );
    blocked.finish();
}

#[test]
fn elections_upgrades_and_revocation_requests_work_on_every_master() {
    let cluster = start(3, 0);
    let manager = cluster_manager(&cluster, Duration::from_secs(30));
    let other = cluster_manager(&cluster, Duration::from_secs(30));
    // Names over every master: each election's keys and channel live in its name's slot.
    for index in 0..6 {
        let name = format!("leader:{index}");
        let election = manager.leader_election(&name);
        let mut observer = other.leader_election(&name).observe().unwrap();
        let leading = election.candidate("here").lock().unwrap();
        assert_eq!(election.leader().unwrap().unwrap().term, leading.term());
        let follower = std::thread::spawn({
            let other = other.clone();
            let name = name.clone();
            move || {
                let candidate = other.leader_election(&name).candidate("there");
                candidate
                    .try_lock_for(Duration::from_secs(10))
                    .unwrap()
                    .map(|g| g.term())
            }
        });
        // The follower asks through the notice channel; the leader hears it and resigns.
        assert_eq!(
            other.leader_election(&name).request_revocation().unwrap(),
            1
        );
        assert!(eventually(Duration::from_secs(5), || leading.is_revocation_requested()));
        let first = leading.term();
        leading.unlock().unwrap();
        let second = follower.join().unwrap().expect("the follower was elected");
        assert!(second > first);
        let changes: Vec<_> = (0..3)
            .map(|_| observer.next_change_for(Duration::from_secs(10)).unwrap())
            .collect();
        assert!(
            matches!(&changes[..], [Some(LeaderChange::Elected(a)), Some(LeaderChange::Resigned(_)), Some(LeaderChange::Elected(b))]
                if a.term == first && b.term == second),
            "{changes:?}"
        );

        let rw = manager.read_write_lock(&format!("stock:{index}"));
        let upgradable = rw.upgradable().lock().unwrap();
        let writing = upgradable.upgrade().unwrap();
        upgradable.downgrade(writing).unwrap();
        upgradable.unlock().unwrap();
    }
}

/// A slot that no master serves (its master gave it up) is a finding of the server check.
#[test]
fn the_server_check_tells_of_slots_no_master_serves() {
    let cluster = start(3, 0);
    let manager = cluster_manager(&cluster, Duration::from_secs(30));
    let clean = || {
        manager
            .check_server()
            .is_ok_and(|findings| findings.is_empty())
    };
    assert!(
        eventually(Duration::from_secs(10), clean),
        "{:?}",
        manager.check_server()
    );
    let master = cluster.master_of_slot(7).unwrap();
    let answer = master.command(&["CLUSTER", "DELSLOTS", "7"]).unwrap();
    assert!(answer.starts_with("+OK"), "{answer}");
    assert!(
        eventually(Duration::from_secs(10), || {
            let findings = manager.check_server().unwrap_or_default();
            findings.iter().any(|finding| {
                matches!(finding, redlease::Finding::SlotsUncovered { assigned, .. } if *assigned < 16384)
            })
        }),
        "{:?}",
        manager.check_server()
    );
}
