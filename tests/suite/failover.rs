//! Failovers under contention. Several processes take and let go of a few locks, many times a
//! second, on a Sentinel deployment (a master, two replicas, three sentinels) or a Cluster
//! (three masters, three replicas), while the test kills the master (SIGKILL, and later its
//! return as a replica), stops it (SIGSTOP for 3 s, so that the failover happens under a
//! frozen master), and in cluster mode migrates a slot under the workers. Every process
//! records, on the host's monotonic clock, each hold of a lock (holder id, fencing token,
//! when it began and ended, whether the guard said it was lost) and every lost-lock report.
//!
//! The checks: with replica acknowledgements from every replica (a fixed count), no two holds of
//! one name ever overlap; with them from every replica in sync at the moment
//! (`connected_replica_acks`, the default), no hold a replica acknowledged is ever overlapped (one
//! granted while its master had no replica in sync may be, and is told); without them (a grant that
//! never reached the promoted replica), every overlap is explained by a loss told to one of the two
//! holders (its guard, its release answered `NotHeld`, or a lost-lock report) within one renewal
//! interval (and a second of slack) after the failover that caused it. A master that was stopped
//! and woke to find itself demoted served no call between its waking and its demotion (its
//! `EVALSHA` count did not move). The run prints its figures: holds, overlaps, the longest time a
//! name could not be taken after each fault, errors by kind.
//!
//! The suite runs the acknowledged runs for 20 s each (in cluster mode, the fixed count only).
//! The others, and longer runs, by hand:
//! `REDLEASE_FAILOVER_SECONDS=60 cargo test --test suite -- failover:: --include-ignored --nocapture`.

use crate::common;
use crate::common::sentinel;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use common::{
    child_role, env, error_name, events_path, eventually, now_ns, spawn_child, KillOnDrop, Random,
};
use redlease::{Error, LockManager};
use redlease_testing::{RedisCluster, RedisServer};
use sentinel::{Deployment, MASTER_NAME};

const PROCESSES: usize = 3;
const WORKERS: u64 = 3;
const NAMES: u64 = 8;
/// The lock's lease: renewed every 2 s.
const WATCHDOG: Duration = Duration::from_secs(6);
const RENEWAL_INTERVAL: Duration = Duration::from_secs(2);
const ACK_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a frozen master stays stopped: past the sentinels' and the cluster's
/// 1 s down-after, so that it is failed over while frozen.
const STOP: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Sentinel,
    Cluster,
}

/// The replica acknowledgements the workers' managers ask for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Acks {
    /// `without_replica_acks`.
    Off,
    /// `connected_replica_acks`, the default: every replica in sync at the moment.
    Connected,
    /// `replica_acks(n)` with `n` every replica of the deployment.
    Every,
}

#[test]
fn sentinel_failovers_with_acks_never_give_a_lock_to_two_untold_holders() {
    run(Mode::Sentinel, Acks::Every);
}

#[test]
fn sentinel_failovers_with_connected_acks_never_lose_an_acknowledged_lock() {
    run(Mode::Sentinel, Acks::Connected);
}

#[test]
#[ignore = "slow; run by hand (see the module doc)"]
fn sentinel_failovers_without_acks_tell_every_holder_that_overlapped() {
    run(Mode::Sentinel, Acks::Off);
}

#[test]
fn cluster_failovers_with_acks_never_give_a_lock_to_two_untold_holders() {
    run(Mode::Cluster, Acks::Every);
}

#[test]
#[ignore = "slow; run by hand (see the module doc)"]
fn cluster_failovers_with_connected_acks_never_lose_an_acknowledged_lock() {
    run(Mode::Cluster, Acks::Connected);
}

#[test]
#[ignore = "slow; run by hand (see the module doc)"]
fn cluster_failovers_without_acks_tell_every_holder_that_overlapped() {
    run(Mode::Cluster, Acks::Off);
}

/// The deployment under test, and what its faults did.
enum Servers {
    Sentinel(Deployment),
    Cluster(RedisCluster),
}

#[derive(Debug, Default)]
struct Faults {
    kills: u32,
    stops: u32,
    migrations: u32,
    /// When each kill or stop began, on the host's monotonic clock.
    at: Vec<u64>,
    /// When the failover after each was seen done.
    done: Vec<u64>,
    /// Stops that outlasted the failover (the master woke demoted by the others).
    stops_failed_over: u32,
    /// `EVALSHA` calls such a master ran from a second after waking (when the calls queued
    /// while it was frozen have run) until it took the replica role.
    served_by_demoted: u64,
}

fn run(mode: Mode, acks: Acks) {
    let seconds: u64 = std::env::var("REDLEASE_FAILOVER_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(20);
    let seed = now_ns() | 1;
    println!("failover {mode:?}, acks {acks:?}: {seconds} s, seed {seed}");
    let mut servers = match mode {
        Mode::Sentinel => Servers::Sentinel(Deployment::start(2)),
        Mode::Cluster => Servers::Cluster(
            RedisCluster::start(3, 1).expect("start a Redis Cluster (install redis-server)"),
        ),
    };
    let addresses = match &servers {
        Servers::Sentinel(deployment) => deployment.sentinel_urls(),
        Servers::Cluster(cluster) => cluster.seed_urls(),
    };
    let replicas = match mode {
        Mode::Sentinel => 2,
        Mode::Cluster => 1,
    };
    let dir = std::env::temp_dir().join(format!(
        "redlease-failover-{}-{mode:?}-{acks:?}",
        std::process::id()
    ));
    fs::create_dir_all(&dir).unwrap();
    let until = now_ns() + seconds * 1_000_000_000;
    let mut children: Vec<KillOnDrop> = (0..PROCESSES)
        .map(|index| {
            spawn_child(
                "failover::failover_process",
                "failover",
                &[
                    ("REDLEASE_FAILOVER_MODE", format!("{mode:?}")),
                    ("REDLEASE_FAILOVER_ADDRESSES", addresses.join(" ")),
                    (
                        "REDLEASE_FAILOVER_ACKS",
                        match acks {
                            Acks::Off => "0".to_owned(),
                            Acks::Connected => "connected".to_owned(),
                            Acks::Every => replicas.to_string(),
                        },
                    ),
                    ("REDLEASE_FAILOVER_UNTIL", until.to_string()),
                    ("REDLEASE_FAILOVER_SEED", (seed + index as u64).to_string()),
                    (
                        "REDLEASE_FAILOVER_EVENTS",
                        events_path(&dir, index).display().to_string(),
                    ),
                ],
            )
        })
        .collect();
    let faults = inject_faults(&mut servers, seed, until);
    for child in &mut children {
        let status = child.wait_within(Duration::from_secs(seconds + 120));
        assert!(status.success(), "a failover process failed");
    }
    println!("failover {mode:?}, acks {acks:?}: faults {faults:?}");
    let events: Vec<Event> = (0..PROCESSES)
        .flat_map(|index| read_events(&events_path(&dir, index)))
        .collect();
    let _ = fs::remove_dir_all(&dir);
    check(mode, acks, &events, &faults);
}

/// Child side: `WORKERS` threads take random names of [`NAMES`] until the end of the run.
#[test]
#[ignore = "a child process of the tests above, which run it"]
fn failover_process() {
    if child_role().as_deref() != Some("failover") {
        return;
    }
    let until: u64 = env("REDLEASE_FAILOVER_UNTIL").parse().unwrap();
    let seed: u64 = env("REDLEASE_FAILOVER_SEED").parse().unwrap();
    let (sender, events) = crossbeam_channel::unbounded::<String>();
    let manager = child_manager(sender.clone());
    std::thread::scope(|scope| {
        for worker in 0..WORKERS {
            let (manager, sender) = (&manager, sender.clone());
            scope.spawn(move || take_repeatedly(manager, until, seed * 31 + worker, &sender));
        }
    });
    drop(manager);
    drop(sender);
    let mut file = fs::File::create(env("REDLEASE_FAILOVER_EVENTS")).unwrap();
    for line in events.iter() {
        writeln!(file, "{line}").unwrap();
    }
}

fn child_manager(events: crossbeam_channel::Sender<String>) -> LockManager {
    let addresses = env("REDLEASE_FAILOVER_ADDRESSES");
    let addresses: Vec<&str> = addresses.split(' ').collect();
    let builder = match env("REDLEASE_FAILOVER_MODE").as_str() {
        "Sentinel" => LockManager::builder_sentinel(addresses, MASTER_NAME),
        _ => LockManager::builder_cluster(addresses),
    };
    let builder = builder
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(WATCHDOG)
        .outage_grace(Duration::from_secs(20))
        .on_lost_lock(move |lost| {
            let _ = events.send(format!(
                "lost {} {} {} {}",
                lost.name,
                lost.holder,
                lost.fencing_token,
                now_ns()
            ));
        });
    let builder = match env("REDLEASE_FAILOVER_ACKS").as_str() {
        "0" => builder.without_replica_acks(),
        "connected" => builder.connected_replica_acks(ACK_TIMEOUT),
        replicas => builder.replica_acks(replicas.parse().unwrap(), ACK_TIMEOUT),
    };
    builder.build().expect("manager")
}

/// Takes random names until `until`, recording `hold <name> <holder> <token> <began>
/// <ended> <lost> <not-held> <acknowledged>` for each hold (`not-held`: its release found it
/// gone; `acknowledged`: how many replicas acknowledged its acquisition, 0 for none asked)
/// and `error <kind>` for each failure.
fn take_repeatedly(
    manager: &LockManager,
    until: u64,
    seed: u64,
    events: &crossbeam_channel::Sender<String>,
) {
    let mut random = Random(seed | 1);
    while now_ns() < until {
        let name = format!("failover-{}", random.below(NAMES));
        match manager.lock(&name).try_lock_for(Duration::from_secs(2)) {
            Ok(Some(guard)) => {
                let began = now_ns();
                std::thread::sleep(Duration::from_millis(1 + random.below(20)));
                let ended = now_ns();
                let lost = guard.is_lost();
                let (holder, token) = (guard.holder_id().to_owned(), guard.fencing_token());
                let acknowledged = guard.replicas_acknowledged().unwrap_or(0);
                let released = guard.unlock();
                let not_held = matches!(released, Err(Error::NotHeld { .. }));
                let _ = events.send(format!(
                    "hold {name} {holder} {token} {began} {ended} {lost} {not_held} \
                     {acknowledged}"
                ));
                if let Err(err) = released {
                    let _ = events.send(format!("error unlock-{}", kind(&err)));
                }
            }
            Ok(None) => {}
            Err(err) => {
                let _ = events.send(format!("error {}", kind(&err)));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn kind(err: &Error) -> String {
    if let Error::Redis(err) = err {
        // The server's code too (`Redis:CLUSTERDOWN`), or the client's kind.
        let code = err
            .code()
            .map_or_else(|| format!("{:?}", err.kind()), str::to_owned);
        return format!("Redis:{}", code.replace(' ', "_"));
    }
    error_name(err)
}

/// Until 5 s before `until`, with the deployment whole between faults: the master killed
/// (and brought back), the master stopped for [`STOP`], or (cluster) a slot migrated.
fn inject_faults(servers: &mut Servers, seed: u64, until: u64) -> Faults {
    let mut random = Random(seed | 1);
    let mut faults = Faults::default();
    std::thread::sleep(Duration::from_secs(2));
    while now_ns() + 5_000_000_000 < until {
        match servers {
            Servers::Sentinel(deployment) => sentinel_fault(deployment, &mut random, &mut faults),
            Servers::Cluster(cluster) => cluster_fault(cluster, &mut random, &mut faults),
        }
        std::thread::sleep(Duration::from_millis(500 + random.below(1500)));
    }
    faults
}

fn sentinel_fault(deployment: &mut Deployment, random: &mut Random, faults: &mut Faults) {
    let old_port = deployment.master().port();
    faults.at.push(now_ns());
    if random.below(2) == 0 {
        deployment.kill_master();
        deployment.wait_for_failover(old_port, Duration::from_secs(60));
        faults.done.push(now_ns());
        faults.kills += 1;
        server_on_mut(deployment, old_port)
            .restart()
            .expect("restart");
    } else {
        let old = deployment.server_on(old_port);
        old.pause().expect("SIGSTOP");
        std::thread::sleep(STOP);
        let failed_over = deployment
            .sentinels
            .iter()
            .all(|sentinel| sentinel.master_port().is_some_and(|port| port != old_port));
        old.resume().expect("SIGCONT");
        if failed_over {
            faults.stops_failed_over += 1;
            faults.served_by_demoted += served_until_demoted(old);
        }
        faults.done.push(now_ns());
        faults.stops += 1;
    }
    assert!(
        eventually(Duration::from_secs(60), || sentinel_whole(deployment)),
        "the deployment never became whole again"
    );
}

fn server_on_mut(deployment: &mut Deployment, port: u16) -> &mut RedisServer {
    deployment
        .servers
        .iter_mut()
        .find(|server| server.port() == port)
        .expect("a server of the deployment")
}

/// One master as every sentinel names it, and every other server its replica, linked up.
fn sentinel_whole(deployment: &Deployment) -> bool {
    let ports: Vec<Option<u16>> = deployment
        .sentinels
        .iter()
        .map(sentinel::Sentinel::master_port)
        .collect();
    let Some(Some(master)) = ports.first().copied() else {
        return false;
    };
    ports.iter().all(|port| *port == Some(master))
        && deployment.servers.iter().all(|server| {
            let info = server.command(&["INFO", "replication"]).unwrap_or_default();
            match server.port() == master {
                true => info.contains("role:master"),
                false => {
                    info.contains(&format!("master_port:{master}"))
                        && info.contains("master_link_status:up")
                }
            }
        })
}

fn cluster_fault(cluster: &mut RedisCluster, random: &mut Random, faults: &mut Faults) {
    let name = format!("failover-{}", random.below(NAMES));
    let slot = cluster.key_slot(&format!("{{{name}}}")).unwrap();
    match random.below(3) {
        0 => {
            faults.at.push(now_ns());
            let port = cluster.kill_master_of_slot(slot).expect("kill");
            cluster
                .wait_for_failover(slot, Duration::from_secs(60))
                .expect("failover");
            faults.done.push(now_ns());
            faults.kills += 1;
            cluster
                .node_mut(port)
                .expect("node")
                .restart()
                .expect("restart");
        }
        1 => {
            faults.at.push(now_ns());
            let old = cluster.master_of_slot(slot).unwrap();
            let replica = cluster.replicas_of(old).unwrap()[0];
            old.pause().expect("SIGSTOP");
            std::thread::sleep(STOP);
            let failed_over = replica
                .command(&["ROLE"])
                .is_ok_and(|role| role.contains("master"));
            old.resume().expect("SIGCONT");
            if failed_over {
                faults.stops_failed_over += 1;
                faults.served_by_demoted += served_until_demoted(old);
            }
            faults.done.push(now_ns());
            faults.stops += 1;
        }
        _ => {
            let from = cluster.master_of_slot(slot).unwrap().port();
            let masters = cluster.masters().unwrap();
            let to = masters
                .iter()
                .find(|master| master.port() != from)
                .expect("another master");
            cluster.migrate_slot(slot, to).expect("migrate");
            faults.migrations += 1;
        }
    }
    cluster
        .wait_until_settled(Duration::from_secs(60))
        .expect("the cluster never settled again");
}

/// The `EVALSHA` calls that `server`, just woken after the others failed it over, runs from
/// a second on (the calls queued while it was frozen have run by then) until it takes the
/// replica role.
fn served_until_demoted(server: &RedisServer) -> u64 {
    std::thread::sleep(Duration::from_secs(1));
    let Some(woke) = evalsha_calls(server) else {
        return 0;
    };
    let demoted = eventually(Duration::from_secs(30), || {
        server
            .command(&["ROLE"])
            .is_ok_and(|role| role.contains("slave"))
    });
    match demoted {
        true => evalsha_calls(server).unwrap_or(woke).saturating_sub(woke),
        false => 0,
    }
}

fn evalsha_calls(server: &RedisServer) -> Option<u64> {
    let stats = server.command(&["INFO", "commandstats"]).ok()?;
    let line = stats
        .lines()
        .find(|line| line.starts_with("cmdstat_evalsha:"))?;
    let calls = line.split(['=', ',']).nth(1)?;
    calls.parse().ok()
}

#[derive(Debug)]
enum Event {
    Hold {
        name: String,
        holder: String,
        token: u64,
        began: u64,
        ended: u64,
        /// Its guard said it was lost, or its release found it gone.
        lost: bool,
        /// How many replicas acknowledged its acquisition (0: none was waited for).
        acknowledged: u32,
    },
    Lost {
        holder: String,
        token: u64,
        at: u64,
    },
    Error {
        kind: String,
    },
}

fn read_events(path: &Path) -> Vec<Event> {
    let text = fs::read_to_string(path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    text.lines()
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["hold", name, holder, token, began, ended, lost, not_held, acknowledged] => {
                    Event::Hold {
                        name: name.to_string(),
                        holder: holder.to_string(),
                        token: token.parse().unwrap(),
                        began: began.parse().unwrap(),
                        ended: ended.parse().unwrap(),
                        lost: *lost == "true" || *not_held == "true",
                        acknowledged: acknowledged.parse().unwrap(),
                    }
                }
                ["lost", _name, holder, token, at] => Event::Lost {
                    holder: holder.to_string(),
                    token: token.parse().unwrap(),
                    at: at.parse().unwrap(),
                },
                ["error", kind] => Event::Error {
                    kind: kind.to_string(),
                },
                _ => panic!("{line:?}"),
            }
        })
        .collect()
}

/// One hold, as checked.
struct Hold<'a> {
    holder: &'a str,
    token: u64,
    began: u64,
    ended: u64,
    /// When it was known lost: by its guard at its end, its release, or a report.
    told: Option<u64>,
    /// How many replicas acknowledged its acquisition (0: none was waited for).
    acknowledged: u32,
}

fn check(mode: Mode, acks: Acks, events: &[Event], faults: &Faults) {
    let reports: HashMap<(&str, u64), u64> = events
        .iter()
        .filter_map(|event| match event {
            Event::Lost { holder, token, at } => Some(((holder.as_str(), *token), *at)),
            _ => None,
        })
        .collect();
    let mut by_name: BTreeMap<&str, Vec<Hold<'_>>> = BTreeMap::new();
    let mut errors = BTreeMap::<&str, usize>::new();
    for event in events {
        match event {
            Event::Hold {
                name,
                holder,
                token,
                began,
                ended,
                lost,
                acknowledged,
            } => by_name.entry(name).or_default().push(Hold {
                holder,
                token: *token,
                began: *began,
                ended: *ended,
                acknowledged: *acknowledged,
                told: reports
                    .get(&(holder.as_str(), *token))
                    .copied()
                    .or(lost.then_some(*ended)),
            }),
            Event::Error { kind } => *errors.entry(kind).or_default() += 1,
            Event::Lost { .. } => {}
        }
    }
    let holds: usize = by_name.values().map(Vec::len).sum();
    let (mut overlaps, mut untold, mut repeated_tokens) = (0, 0, 0);
    // Overlaps whose first hold was acknowledged by the replicas waited for.
    let mut acknowledged_overlaps = 0;
    // When the first of each overlapping pair to be told was told.
    let mut told_of_overlaps = Vec::new();
    for holds in by_name.values_mut() {
        holds.sort_by_key(|hold| hold.began);
        for (index, first) in holds.iter().enumerate() {
            for second in holds[index + 1..]
                .iter()
                .take_while(|second| second.began < first.ended)
            {
                overlaps += 1;
                acknowledged_overlaps += u32::from(first.acknowledged > 0);
                told_of_overlaps.extend(first.told.into_iter().chain(second.told).min());
                if first.told.is_none() && second.told.is_none() {
                    untold += 1;
                    println!(
                        "untold overlap: {} token {} and {} token {}",
                        first.holder, first.token, second.holder, second.token
                    );
                }
            }
        }
        let mut tokens: Vec<(u64, &str)> = holds.iter().map(|h| (h.token, h.holder)).collect();
        tokens.sort_unstable();
        tokens.dedup();
        repeated_tokens += tokens
            .windows(2)
            .filter(|pair| pair[0].0 == pair[1].0)
            .count();
    }
    // How late the holders of overlapping holds were told, after the failover before.
    let latest_report = told_of_overlaps
        .iter()
        .map(|at| {
            let done = faults.done.iter().filter(|done| *done <= at).max();
            Duration::from_nanos(done.map_or(0, |done| at - done))
        })
        .max();
    // How long each name could not be taken after each fault: the longest gap per fault.
    let unavailable: Vec<Duration> = faults
        .at
        .iter()
        .map(|at| {
            let longest = by_name
                .values()
                .filter_map(|holds| holds.iter().map(|h| h.began).find(|began| began > at))
                .max()
                .unwrap_or(*at);
            Duration::from_nanos(longest - at)
        })
        .collect();
    println!(
        "failover {mode:?}, acks {acks:?}: {holds} holds over {} names; overlaps {overlaps} \
         (untold {untold}, of an acknowledged hold {acknowledged_overlaps}); holders sharing a token {repeated_tokens}; latest loss report \
         of an overlap {latest_report:?} after its failover; unavailable after each fault \
         {unavailable:?}; EVALSHA served by a demoted master {} (stops that outlasted their \
         failover {}); errors {errors:?}",
        by_name.len(),
        faults.served_by_demoted,
        faults.stops_failed_over
    );
    assert!(holds > 0, "nothing was ever held");
    assert_eq!(untold, 0, "two holders of one lock, neither told");
    assert_eq!(
        faults.served_by_demoted, 0,
        "a demoted master served calls after it woke"
    );
    if acks == Acks::Every {
        assert_eq!(
            overlaps, 0,
            "overlapping holds with acks from every replica"
        );
    } else if acks == Acks::Connected {
        // A hold granted while its master had no replica in sync waited for none: a failover
        // then may lose it, and its holder is told.
        assert_eq!(
            acknowledged_overlaps, 0,
            "an acknowledged hold overlapped by another"
        );
    } else if let Some(latest) = latest_report {
        assert!(
            latest <= RENEWAL_INTERVAL + Duration::from_secs(1),
            "the holder of an overlapping hold was told {latest:?} after its failover"
        );
    }
}
