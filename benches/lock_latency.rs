//! Lock latency against the raw Redis round trip, all measured in one run on one server.
//!
//! `cargo bench --bench lock_latency [-- redis-url]`: without a URL it starts a throwaway
//! `redis-server`. Prints the PING round trip, the uncontended lock+unlock pair, the
//! uncontended semaphore acquire+release pair (and its two scripts alone), the handoff
//! latency between 8 contending threads (release started -> next holder has it), each as a
//! ratio to the round trip; a guarded write of one value by a lock's holder against a plain
//! `SET` on one connection (`-- --guarded-only` for these alone); the fair lock's handoff and
//! its contenders' waits, and the read lock's pair; the upgradable read's pair, an upgrade
//! with its downgrade, an election's campaign with its resignation, and a revocation request
//! until its holder hears it (`-- --coordination-only` for these alone); and how the
//! watchdog copes with 100 000 held locks. Then, on five
//! throwaway servers, a Redlock's uncontended acquire+release against the single-master pair
//! measured on the first of them in the same run, and how many acquisitions four contending
//! threads make with every master answering, and with one or two of them frozen (SIGSTOP).
//! Last, on a throwaway master with one replica, the lock+unlock pair with every write
//! acknowledged by the replica, with a fixed count (`replica_acks(1, ...)`) and by default
//! (the replicas in sync), against the same pair without (`without_replica_acks`), each as
//! a ratio to the PING round trip to that master measured in the same run (alone with
//! `-- --acks-only`).
//!
//! Cluster (after the replica acknowledgements, or alone with `-- --cluster-only`): on a
//! throwaway cluster of three masters, the lock+unlock pair against the PING round trip to
//! the master of its name; the aggregate rate of lock+unlock pairs on many names from 8
//! threads, on the cluster and on one single server in the same run (both share this
//! machine's cores); and, for 100 000 locks held with a 3 s watchdog, how the renewals reach
//! each master (pipelines, script calls, locks per call), from `INFO commandstats`.
//!
//! TLS (with the `tls` feature, last, or alone with `-- --tls-only`): on a throwaway TLS-only
//! server reached as `rediss://localhost` with a test CA, the TLS PING round trip (and its
//! ratio to a plaintext PING, the two interleaved), then the lock+unlock pair and the handoff
//! between 8 threads over TLS, each as a ratio to the TLS round trip.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{floor, measure_steps, Samples};
use parking_lot::Mutex;
use redlease::{Lock, LockManager, RedLock};
use redlease_testing::{url_or_throwaway, RedisCluster, RedisServer};
#[cfg(feature = "tls")]
use redlease_testing::{TlsFiles, TlsServerOptions};

const ROUND_TRIPS: usize = 20_000;
const PAIRS: usize = 20_000;
const CONTENDERS: usize = 8;
const HANDOFFS_PER_THREAD: usize = 400;
const HELD_LOCKS: usize = 100_000;
const MASTERS: usize = 5;
const REDLOCK_PAIRS: usize = 10_000;
const REDLOCK_CONTENDERS: usize = 4;
const CONTENTION_RUN: Duration = Duration::from_secs(4);
/// The ack timeout of the acknowledged pairs: never reached while the replica keeps up.
const ACK_TIMEOUT: Duration = Duration::from_millis(500);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|arg| arg == "--tls-only") {
        return measure_tls();
    }
    if std::env::args().any(|arg| arg == "--cluster-only") {
        return measure_cluster();
    }
    if std::env::args().any(|arg| arg == "--acks-only") {
        return measure_replica_acks();
    }
    let url_argument = std::env::args()
        .skip(1)
        .find(|arg| arg.starts_with("redis"));
    let (url, _server) = url_or_throwaway(url_argument)?;
    let manager = LockManager::builder(url.as_str()).build()?;

    let round_trip = Samples::new(measure_round_trips(&url)?);
    println!("{:<36} {}", "round trip (PING)", round_trip.describe(None));
    if std::env::args().any(|arg| arg == "--coordination-only") {
        let pair = Samples::new(measure_pairs(&manager)?);
        let label = "lock+unlock pair (to compare)";
        println!("{label:<36} {}", pair.describe(Some(&round_trip)));
        return measure_coordination(&manager, &round_trip);
    }

    let pair = Samples::new(measure_pairs(&manager)?);
    println!(
        "{:<36} {}",
        "lock+unlock pair, uncontended",
        pair.describe(Some(&round_trip))
    );

    let semaphore_pair = Samples::new(measure_semaphore_pairs(&manager)?);
    println!(
        "{:<36} {}",
        "semaphore acquire+release, 1 permit",
        semaphore_pair.describe(Some(&round_trip))
    );
    let semaphore_floor = Samples::new(measure_semaphore_scripts(&url)?);
    println!(
        "{:<36} {}",
        "  its two scripts alone, no library",
        semaphore_floor.describe(Some(&round_trip))
    );

    measure_guarded_writes(&manager, &url, &round_trip)?;
    if std::env::args().any(|arg| arg == "--guarded-only") {
        return Ok(());
    }

    let handoff = Samples::new(measure_handoffs(&manager)?);
    println!(
        "{:<36} {}",
        format!("handoff, {CONTENDERS} threads"),
        handoff.describe(Some(&round_trip))
    );

    measure_other_locks(&manager, &round_trip)?;

    if std::env::args().any(|arg| arg == "--redlock-only") {
        measure_redlock()?;
        return Ok(());
    }
    measure_held_locks(&url)?;
    measure_redlock()?;
    measure_replica_acks()?;
    measure_cluster()?;
    measure_tls()
}

// ---------------------------------------------------------------------------------------
// Redis Cluster: three masters.
// ---------------------------------------------------------------------------------------

/// How long each side of the aggregate rate runs.
const AGGREGATE_RUN: Duration = Duration::from_secs(4);
/// The threads taking and releasing locks on many names at once.
const AGGREGATE_THREADS: usize = 8;

/// The pair on a cluster master against the PING round trip to it; the aggregate rate of
/// pairs on many names, cluster against single server; the renewals of 100 000 locks.
fn measure_cluster() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = RedisCluster::start(3, 0)?;
    let single = RedisServer::start()?;
    let manager = LockManager::builder_cluster(cluster.seed_urls()).build()?;
    let master_url = cluster.master_of_key("bench:pair")?.url();
    let round_trip = Samples::new(measure_round_trips(&master_url)?);
    println!(
        "{:<36} {}",
        "cluster: round trip (PING) to master",
        round_trip.describe(None)
    );
    let pair = Samples::new(measure_pairs(&manager)?);
    println!(
        "{:<36} {}",
        "cluster: lock+unlock pair",
        pair.describe(Some(&round_trip))
    );
    let on_cluster = aggregate_rate(&manager)?;
    let single_manager = LockManager::builder(single.url()).build()?;
    let on_single = aggregate_rate(&single_manager)?;
    println!(
        "{:<36} cluster {on_cluster:.0} pairs/s, single server {on_single:.0} pairs/s = {:.2}x (all processes on this machine's cores)",
        format!("{AGGREGATE_THREADS} threads, many names"),
        on_cluster / on_single
    );
    measure_cluster_renewals(&cluster, "plain names", "bench:held:*", |i| {
        format!("bench:held:{i}")
    })?;
    measure_cluster_renewals(
        &cluster,
        "names under 300 hash tags",
        "{tenant-*}:bench:held:*",
        |i| format!("{{tenant-{}}}:bench:held:{i}", i % 300),
    )
}

/// Lock+unlock pairs per second from [`AGGREGATE_THREADS`] threads, each on names of its own.
fn aggregate_rate(manager: &LockManager) -> redlease::Result<f64> {
    let pairs = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..AGGREGATE_THREADS)
            .map(|thread| {
                scope.spawn(move || -> redlease::Result<u64> {
                    let locks: Vec<Lock> = (0..256)
                        .map(|i| manager.lock(&format!("bench:aggregate:{thread}:{i}")))
                        .collect();
                    let until = Instant::now() + AGGREGATE_RUN;
                    let mut pairs = 0u64;
                    while Instant::now() < until {
                        for lock in &locks {
                            lock.lock()?.unlock()?;
                            pairs += 1;
                        }
                    }
                    Ok(pairs)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("a bench thread panicked"))
            .sum::<redlease::Result<u64>>()
    })?;
    Ok(pairs as f64 / AGGREGATE_RUN.as_secs_f64())
}

/// Holds 100 000 locks named by `name` (keys matching `pattern`) on the cluster with a 3 s watchdog for three
/// timeouts, and counts what reached each master.
fn measure_cluster_renewals(
    cluster: &RedisCluster,
    names: &str,
    pattern: &str,
    name: fn(usize) -> String,
) -> Result<(), Box<dyn std::error::Error>> {
    let watchdog = Duration::from_secs(3);
    let manager = LockManager::builder_cluster(cluster.seed_urls())
        .watchdog_timeout(watchdog)
        .build()?;
    let locks: Vec<_> = (0..HELD_LOCKS).map(|i| manager.lock(&name(i))).collect();
    let guards = locks
        .iter()
        .map(|lock| lock.lock())
        .collect::<redlease::Result<Vec<_>>>()?;
    let masters = cluster.masters()?;
    let scripts_before = masters
        .iter()
        .map(|master| evalsha_calls(master))
        .collect::<std::io::Result<Vec<_>>>()?;
    let stats_before = manager.stats();
    std::thread::sleep(watchdog * 3);
    let stats = manager.stats();
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    let renewed = stats.renewals_sent - stats_before.renewals_sent;
    let pipelines = stats.renewal_batches - stats_before.renewal_batches;
    for (master, before) in masters.iter().zip(scripts_before) {
        let calls = evalsha_calls(master)? - before;
        let held_there: u64 = master
            .command(&["EVAL", "return #redis.call('keys', ARGV[1])", "0", pattern])?
            .trim()
            .trim_start_matches(':')
            .parse()
            .unwrap_or(0);
        let intervals = 9;
        println!(
            "{:<36} {held_there} locks: {:.0} script calls per renewal interval = {:.2} locks per call",
            format!("  renewals on master :{}", master.port()),
            calls as f64 / intervals as f64,
            held_there as f64 * intervals as f64 / calls.max(1) as f64
        );
    }
    println!(
        "{:<36} {renewed} renewals in {pipelines} pipelines ({:.0} locks per pipeline) in 9 renewal intervals, {lost} lost",
        format!("cluster: {HELD_LOCKS} locks, {names}"),
        renewed as f64 / pipelines.max(1) as f64
    );
    drop(guards);
    Ok(())
}

/// How many `EVALSHA` calls `server` has run (`INFO commandstats`).
fn evalsha_calls(server: &RedisServer) -> std::io::Result<u64> {
    let info = server.command(&["INFO", "commandstats"])?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0))
}

// ---------------------------------------------------------------------------------------
// Replica acknowledgements: one master, one replica.
// ---------------------------------------------------------------------------------------

/// On a master with one replica: the lock+unlock pair whose acquisition and release each
/// wait for the replica's acknowledgement (`WAIT 1` in the same round trip), with a fixed
/// count and with the default (the replicas in sync), against the same pair without, all
/// against the PING round trip to the master, in the same run.
fn measure_replica_acks() -> Result<(), Box<dyn std::error::Error>> {
    let (master, _replica) = RedisServer::start_with_replica()?;
    let plain = LockManager::builder(master.url())
        .without_replica_acks()
        .build()?;
    let acknowledged = LockManager::builder(master.url())
        .replica_acks(1, ACK_TIMEOUT)
        .build()?;
    let connected = LockManager::builder(master.url())
        .connected_replica_acks(ACK_TIMEOUT)
        .build()?;
    let round_trip = Samples::new(measure_round_trips(&master.url())?);
    let without = Samples::new(measure_pairs(&plain)?);
    let by_default = Samples::new(measure_pairs(&connected)?);
    let with = Samples::new(measure_pairs(&acknowledged)?);

    let unreplicated = acknowledged.stats().releases_unreplicated;
    println!(
        "{:<36} {}",
        "round trip (PING), master + replica",
        round_trip.describe(None)
    );
    println!(
        "{:<36} {}",
        "lock+unlock pair, no acks",
        without.describe(Some(&round_trip))
    );
    println!(
        "{:<36} {}",
        "lock+unlock pair, replica_acks(1)",
        with.describe(Some(&round_trip))
    );
    println!(
        "{:<36} p50 {:.2} x, p99 {:.2} x the pair without ({unreplicated} releases unreplicated)",
        "replica_acks(1) / no acks",
        with.percentile(50).as_secs_f64() / without.percentile(50).as_secs_f64(),
        with.percentile(99).as_secs_f64() / without.percentile(99).as_secs_f64()
    );
    println!(
        "{:<36} {}",
        "lock+unlock pair, connected (default)",
        by_default.describe(Some(&round_trip))
    );
    println!(
        "{:<36} p50 {:.2} x, p99 {:.2} x the pair without",
        "connected (default) / no acks",
        by_default.percentile(50).as_secs_f64() / without.percentile(50).as_secs_f64(),
        by_default.percentile(99).as_secs_f64() / without.percentile(99).as_secs_f64()
    );
    Ok(())
}

/// TLS: a TLS-only server's PING round trip, and the lock pair and handoff over TLS against
/// it, all in this run.
#[cfg(feature = "tls")]
fn measure_tls() -> Result<(), Box<dyn std::error::Error>> {
    let files = TlsFiles::generate()?;
    let server = RedisServer::start_tls(&files, &TlsServerOptions::default())?;
    let plaintext = RedisServer::start()?;
    let ca = std::fs::read(files.ca_certificate())?;
    // Built first: it installs the crypto provider that redis-rs's TLS takes.
    let manager = LockManager::builder(server.url())
        .tls_ca_certificate(&ca)
        .build()?;
    let tls_client = redis::Client::build_with_tls(
        server.url(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca),
        },
    )?;
    let (plain_round_trip, round_trip) =
        measure_interleaved_round_trips(&redis::Client::open(plaintext.url())?, &tls_client)?;
    let (plain_round_trip, round_trip) = (Samples::new(plain_round_trip), Samples::new(round_trip));
    println!("--- TLS: rediss://localhost, a TLS-only server; ratios to the TLS PING ---");
    println!(
        "{:<36} {}",
        "TLS round trip (PING)",
        round_trip.describe(None)
    );
    println!(
        "{:<36} p50 {:.2} x the plaintext PING ({:.1} µs), interleaved with it",
        "  TLS PING / plaintext PING",
        round_trip.percentile(50).as_secs_f64() / plain_round_trip.percentile(50).as_secs_f64(),
        plain_round_trip.percentile(50).as_secs_f64() * 1e6
    );
    let pair = Samples::new(measure_pairs(&manager)?);
    println!(
        "{:<36} {}",
        "TLS lock+unlock pair, uncontended",
        pair.describe(Some(&round_trip))
    );
    let handoff = Samples::new(measure_handoffs(&manager)?);
    println!(
        "{:<36} {}",
        format!("TLS handoff, {CONTENDERS} threads"),
        handoff.describe(Some(&round_trip))
    );
    Ok(())
}

/// A plaintext and a TLS PING round trip, one after the other in each round, so that both
/// see the same load (on a VM the loopback round trip changes with what the other cores do).
#[cfg(feature = "tls")]
fn measure_interleaved_round_trips(
    plaintext: &redis::Client,
    tls: &redis::Client,
) -> redis::RedisResult<(Vec<Duration>, Vec<Duration>)> {
    let mut connections = [plaintext.get_connection()?, tls.get_connection()?];
    let mut samples = (
        Vec::with_capacity(ROUND_TRIPS),
        Vec::with_capacity(ROUND_TRIPS),
    );
    for round in 0..ROUND_TRIPS + 1_000 {
        let [plain, tls] = connections.each_mut().map(|connection| {
            let started = Instant::now();
            redis::cmd("PING").query::<()>(connection)?;
            Ok::<_, redis::RedisError>(started.elapsed())
        });
        let (plain, tls) = (plain?, tls?);
        if round >= 1_000 {
            samples.0.push(plain);
            samples.1.push(tls);
        }
    }
    Ok(samples)
}

#[cfg(not(feature = "tls"))]
fn measure_tls() -> Result<(), Box<dyn std::error::Error>> {
    println!("--- TLS: skipped, the `tls` feature is off ---");
    Ok(())
}

/// A Redlock over five servers against one lock on the first of them, same run.
fn measure_redlock() -> Result<(), Box<dyn std::error::Error>> {
    let servers = (0..MASTERS)
        .map(|_| RedisServer::start())
        .collect::<std::io::Result<Vec<_>>>()?;
    let managers = servers
        .iter()
        .map(|server| LockManager::builder(server.url()).build())
        .collect::<redlease::Result<Vec<_>>>()?;
    let round_trip = Samples::new(measure_round_trips(&servers[0].url())?);
    let fan_out = Samples::new(measure_fan_out_pings(&servers)?);
    let scripts_floor = Samples::new(measure_fan_out_scripts(&servers)?);
    let single = Samples::new(measure_pairs(&managers[0])?);
    let redlock = RedLock::from_managers(&managers, "bench:redlock")?;
    for _ in 0..1_000 {
        redlock.lock()?.unlock()?;
    }
    let samples = (0..REDLOCK_PAIRS)
        .map(|_| {
            let started = Instant::now();
            redlock.lock()?.unlock()?;
            Ok(started.elapsed())
        })
        .collect::<redlease::Result<Vec<_>>>()?;
    let redlock_pairs = Samples::new(samples);
    println!(
        "{:<36} {}",
        format!("PING to {MASTERS} servers at once"),
        fan_out.describe(Some(&round_trip))
    );
    println!(
        "{:<36} {}",
        format!("raw acquire+release scripts, {MASTERS}"),
        scripts_floor.describe(Some(&round_trip))
    );
    println!(
        "{:<36} {}",
        "single-master pair (first of 5)",
        single.describe(Some(&round_trip))
    );
    println!(
        "{:<36} {}",
        format!("Redlock pair, {MASTERS} masters"),
        redlock_pairs.describe(Some(&round_trip))
    );
    println!(
        "{:<36} p50 {:.2} x the PING to {MASTERS} servers at once",
        "Redlock / fan-out PING",
        redlock_pairs.percentile(50).as_secs_f64() / fan_out.percentile(50).as_secs_f64()
    );
    println!(
        "{:<36} p50 {:.2} x the raw scripts sent to {MASTERS} servers at once",
        "Redlock / raw scripts",
        redlock_pairs.percentile(50).as_secs_f64() / scripts_floor.percentile(50).as_secs_f64()
    );
    println!(
        "{:<36} p50 {:.2} x, p99 {:.2} x the single-master pair",
        "Redlock / single",
        redlock_pairs.percentile(50).as_secs_f64() / single.percentile(50).as_secs_f64(),
        redlock_pairs.percentile(99).as_secs_f64() / single.percentile(99).as_secs_f64()
    );

    let healthy = measure_redlock_contention(&redlock)?;
    println!(
        "{:<36} {healthy} acquisitions in {CONTENTION_RUN:?}",
        format!("Redlock, {REDLOCK_CONTENDERS} threads, all answer")
    );
    for frozen in 1..=2 {
        for server in &servers[..frozen] {
            server.pause()?;
        }
        // The first acquisition waits the attempt timeout for the frozen masters, once;
        // later ones do not.
        let started = Instant::now();
        let first = redlock.lock().and_then(|guard| guard.unlock());
        let first_took = started.elapsed();
        let count = first.and_then(|()| measure_redlock_contention(&redlock));
        for server in &servers[..frozen] {
            server.resume()?;
        }
        let count = count?;
        println!(
            "{:<36} {count} acquisitions in {CONTENTION_RUN:?} ({:.2} x healthy), after a first one of {first_took:.2?}",
            format!("Redlock, {REDLOCK_CONTENDERS} threads, {frozen} frozen"),
            count as f64 / healthy.max(1) as f64
        );
    }
    Ok(())
}

/// How many acquisitions `REDLOCK_CONTENDERS` threads sharing `redlock` make in
/// `CONTENTION_RUN`, each releasing at once.
fn measure_redlock_contention(redlock: &RedLock) -> redlease::Result<usize> {
    let until = Instant::now() + CONTENTION_RUN;
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..REDLOCK_CONTENDERS)
            .map(|_| {
                scope.spawn(move || -> redlease::Result<usize> {
                    let mut count = 0;
                    while Instant::now() < until {
                        let wait = until.saturating_duration_since(Instant::now());
                        match redlock.try_lock_for(wait) {
                            Ok(Some(guard)) => {
                                guard.unlock()?;
                                count += 1;
                            }
                            Ok(None) => {}
                            Err(err) if err.is_transient() => {}
                            Err(err) => return Err(err),
                        }
                    }
                    Ok(count)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("contender panicked"))
            .sum()
    })
}

fn measure_round_trips(url: &str) -> redis::RedisResult<Vec<Duration>> {
    let mut connection = redis::Client::open(url)?.get_connection()?;
    for _ in 0..1_000 {
        redis::cmd("PING").query::<()>(&mut connection)?;
    }
    (0..ROUND_TRIPS)
        .map(|_| {
            let started = Instant::now();
            redis::cmd("PING").query::<()>(&mut connection)?;
            Ok(started.elapsed())
        })
        .collect()
}

/// A guarded write of one value (the holder checked in the same script, once per request)
/// against a plain `SET` on one connection, measured in turn, and both against `round_trip`.
fn measure_guarded_writes(
    manager: &LockManager,
    url: &str,
    round_trip: &Samples,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut connection = redis::Client::open(url)?.get_connection()?;
    let guard = manager.lock("bench:guarded").lock()?;
    let mut write = redlease::Writes::new();
    write.set("{bench:guarded}:status", "running");
    let mut set = || {
        redis::cmd("SET")
            .arg("bench:set")
            .arg("running")
            .query::<()>(&mut connection)
    };
    for _ in 0..1_000 {
        set()?;
        guard.guarded_write(&write)?;
    }
    let (mut sets, mut guarded) = (Vec::with_capacity(PAIRS), Vec::with_capacity(PAIRS));
    for _ in 0..PAIRS {
        let started = Instant::now();
        set()?;
        sets.push(started.elapsed());
        let started = Instant::now();
        guard.guarded_write(&write)?;
        guarded.push(started.elapsed());
    }
    let (sets, guarded) = (Samples::new(sets), Samples::new(guarded));
    println!(
        "{:<36} {}",
        "SET, one connection, no library",
        sets.describe(Some(round_trip))
    );
    println!(
        "{:<36} {}",
        "guarded write, one SET",
        guarded.describe(Some(round_trip))
    );
    println!(
        "{:<36} p50 {:.2} x the plain SET, p99 {:.2} x",
        "",
        guarded.percentile(50).as_secs_f64() / sets.percentile(50).as_secs_f64(),
        guarded.percentile(99).as_secs_f64() / sets.percentile(99).as_secs_f64()
    );
    Ok(())
}

fn measure_pairs(manager: &LockManager) -> redlease::Result<Vec<Duration>> {
    measure_lock_pairs(&manager.lock("bench:pair"))
}

/// Uncontended take+release pairs of `lock`.
fn measure_lock_pairs(lock: &Lock) -> redlease::Result<Vec<Duration>> {
    measure_steps(PAIRS, || lock.lock()?.unlock())
}

/// An uncontended semaphore acquire(1)+release(1) pair, on a semaphore of one permit.
fn measure_semaphore_pairs(manager: &LockManager) -> redlease::Result<Vec<Duration>> {
    let semaphore = manager.semaphore("bench:semaphore");
    semaphore.try_set_permits(1)?;
    for _ in 0..1_000 {
        semaphore.acquire(1)?;
        semaphore.release(1)?;
    }
    (0..PAIRS)
        .map(|_| {
            let started = Instant::now();
            semaphore.acquire(1)?;
            semaphore.release(1)?;
            Ok(started.elapsed())
        })
        .collect()
}

/// The floor of a semaphore pair: its take and add scripts, as the crate assembles them (each
/// run once per request: a request key, its deadline and until when it keeps the answer),
/// sent on a plain connection with nothing around them (what is left is the round trips and
/// the scripts' run time).
fn measure_semaphore_scripts(url: &str) -> redis::RedisResult<Vec<Duration>> {
    let mut connection = redis::Client::open(url)?.get_connection()?;
    let semaphore = floor::Semaphore::new(&mut connection)?;
    let name = "bench:semaphore-floor";
    redis::cmd("SET")
        .arg(name)
        .arg(1)
        .query::<()>(&mut connection)?;
    let mut round = 0u64;
    let mut pair = || -> redis::RedisResult<Duration> {
        round += 1;
        let request = |verb: &str| format!("redlease_request:{{{name}}}:{verb}{round}");
        let started = Instant::now();
        semaphore
            .take(name, 1, &request("take"))
            .invoke::<i64>(&mut connection)?;
        semaphore
            .add(name, 1, &request("add"))
            .invoke::<(i64, i64)>(&mut connection)?;
        Ok(started.elapsed())
    };
    for _ in 0..1_000 {
        pair()?;
    }
    (0..PAIRS).map(|_| pair()).collect()
}

/// The physical floor of a fan-out: PING written to every server, then every answer read.
fn measure_fan_out_pings(servers: &[RedisServer]) -> redis::RedisResult<Vec<Duration>> {
    let mut connections = servers
        .iter()
        .map(|server| redis::Client::open(server.url())?.get_connection())
        .collect::<redis::RedisResult<Vec<_>>>()?;
    let ping = redis::cmd("PING").get_packed_command();
    (0..ROUND_TRIPS + 1_000)
        .map(|_| {
            let started = Instant::now();
            for connection in &mut connections {
                connection.send_packed_command(&ping)?;
            }
            for connection in &mut connections {
                connection.recv_response()?;
            }
            Ok(started.elapsed())
        })
        .skip(1_000)
        .collect()
}

/// The floor of a Redlock pair on these servers: the lock's own acquire and release scripts,
/// each sent to every server at once, with nothing else around them.
fn measure_fan_out_scripts(servers: &[RedisServer]) -> redis::RedisResult<Vec<Duration>> {
    let mut connections = servers
        .iter()
        .map(|server| redis::Client::open(server.url())?.get_connection())
        .collect::<redis::RedisResult<Vec<_>>>()?;
    let lock = floor::PlainLock::new(&mut connections[0])?;
    for connection in &mut connections {
        lock.load(connection)?;
    }
    let (name, holder) = ("bench:floor", "bench-floor:1");
    let take = lock.acquire(name, holder).evalsha().get_packed_command();
    (0..ROUND_TRIPS as u64 + 1_000)
        .map(|round| {
            let give = lock
                .release(name, holder, round)
                .evalsha()
                .get_packed_command();
            let started = Instant::now();
            for packed in [&take, &give] {
                for connection in &mut connections {
                    connection.send_packed_command(packed)?;
                }
                for connection in &mut connections {
                    connection.recv_response()?;
                }
            }
            Ok(started.elapsed())
        })
        .skip(1_000)
        .collect()
}

fn measure_handoffs(manager: &LockManager) -> redlease::Result<Vec<Duration>> {
    Ok(measure_contention(&manager.lock("bench:handoff"))?.handoffs)
}

/// What contenders for one lock saw.
struct Contention {
    /// From the start of a release to the next acquisition.
    handoffs: Vec<Duration>,
    /// From asking for the lock to having it.
    waits: Vec<Duration>,
    /// From one acquisition to the next: a holder's turn, its handoff included.
    turns: Vec<Duration>,
}

/// Every thread takes the lock, notes when it asked and got it, and notes when it starts
/// releasing; a handoff is the time from one release's start to the next acquisition.
fn measure_contention(lock: &Lock) -> redlease::Result<Contention> {
    let release_started: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let last_acquired: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let handoffs = Arc::new(Mutex::new(Vec::new()));
    let waits = Arc::new(Mutex::new(Vec::new()));
    let turns = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            let lock = lock.clone();
            let release_started = Arc::clone(&release_started);
            let last_acquired = Arc::clone(&last_acquired);
            let handoffs = Arc::clone(&handoffs);
            let waits = Arc::clone(&waits);
            let turns = Arc::clone(&turns);
            std::thread::spawn(move || -> redlease::Result<()> {
                for _ in 0..HANDOFFS_PER_THREAD {
                    let asked_at = Instant::now();
                    let guard = lock.lock()?;
                    let acquired_at = Instant::now();
                    waits.lock().push(acquired_at - asked_at);
                    if let Some(previous) = last_acquired.lock().replace(acquired_at) {
                        turns.lock().push(acquired_at - previous);
                    }
                    if let Some(released_at) = release_started.lock().take() {
                        handoffs.lock().push(acquired_at - released_at);
                    }
                    // A short critical section, so that the others are all waiting.
                    while acquired_at.elapsed() < Duration::from_micros(50) {
                        std::hint::spin_loop();
                    }
                    *release_started.lock() = Some(Instant::now());
                    guard.unlock()?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("contender panicked")?;
    }
    let take = |samples: &Mutex<Vec<Duration>>| std::mem::take(&mut *samples.lock());
    Ok(Contention {
        handoffs: take(&handoffs),
        waits: take(&waits),
        turns: take(&turns),
    })
}

/// The fair lock's handoff between contenders, and how long the last in line waits against
/// the turns ahead of it; the read lock's uncontended pair.
fn measure_other_locks(
    manager: &LockManager,
    round_trip: &Samples,
) -> Result<(), Box<dyn std::error::Error>> {
    let fair = measure_contention(&manager.fair_lock("bench:fair"))?;
    let turn = mean(&fair.turns);
    let handoffs = Samples::new(fair.handoffs);
    let waits = Samples::new(fair.waits);
    println!(
        "{:<36} {}",
        format!("fair lock handoff, {CONTENDERS} threads"),
        handoffs.describe(Some(round_trip))
    );
    let bound = turn * (CONTENDERS as u32 - 1) + round_trip.percentile(50) * 10;
    println!(
        "{:<36} p99 {:.1} µs against (contenders - 1) x turn {:.1} µs + 10 round trips = {:.1} µs",
        "fair lock wait of a contender",
        waits.percentile(99).as_secs_f64() * 1e6,
        turn.as_secs_f64() * 1e6,
        bound.as_secs_f64() * 1e6
    );
    let read_pairs = Samples::new(measure_lock_pairs(
        manager.read_write_lock("bench:rw").read(),
    )?);
    println!(
        "{:<36} {}",
        "read lock pair, uncontended",
        read_pairs.describe(Some(round_trip))
    );
    measure_coordination(manager, round_trip)?;
    Ok(())
}

/// The coordination primitives, uncontended: the upgradable read's pair, an upgrade and its
/// downgrade, an election's campaign and resignation (each two scripts: about two round
/// trips at best), and a revocation request to a holder of the same process, heard on its
/// guard (a script and a pub/sub message).
fn measure_coordination(
    manager: &LockManager,
    round_trip: &Samples,
) -> Result<(), Box<dyn std::error::Error>> {
    let rw = manager.read_write_lock("bench:upgradable");
    let upgradable = rw.upgradable();
    let pairs = Samples::new(measure_steps(PAIRS, || upgradable.lock()?.unlock())?);
    println!(
        "{:<36} {}",
        "upgradable read pair",
        pairs.describe(Some(round_trip))
    );
    let held = upgradable.lock()?;
    let upgrades = Samples::new(measure_steps(PAIRS, || held.downgrade(held.upgrade()?))?);
    println!(
        "{:<36} {}",
        "upgrade+downgrade",
        upgrades.describe(Some(round_trip))
    );
    drop(held);
    let candidate = manager.leader_election("bench:election").candidate("bench");
    let terms = Samples::new(measure_steps(PAIRS, || candidate.lock()?.unlock())?);
    println!(
        "{:<36} {}",
        "campaign+resign pair",
        terms.describe(Some(round_trip))
    );
    let lock = manager.lock("bench:revocable");
    let mut heard = Vec::with_capacity(PAIRS / 10);
    for _ in 0..PAIRS / 10 {
        // Each request is heard once per hold: a fresh chain each time.
        let guard = lock.lock()?;
        let asked = guard.revocation_signal();
        let started = Instant::now();
        lock.request_revocation()?;
        asked.recv_timeout(Duration::from_secs(5))?;
        heard.push(started.elapsed());
        drop(guard);
    }
    let heard = Samples::new(heard);
    println!(
        "{:<36} {}",
        "revocation request, heard",
        heard.describe(Some(round_trip))
    );
    Ok(())
}

fn mean(samples: &[Duration]) -> Duration {
    samples.iter().sum::<Duration>() / samples.len().max(1) as u32
}

/// Holds 100 000 locks on one manager with a 3 s watchdog for three timeouts.
fn measure_held_locks(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let watchdog = Duration::from_secs(3);
    let manager = LockManager::builder(url)
        .watchdog_timeout(watchdog)
        .build()?;
    let locks: Vec<_> = (0..HELD_LOCKS)
        .map(|i| manager.lock(&format!("bench:held:{i}")))
        .collect();
    let started = Instant::now();
    let guards = locks
        .iter()
        .map(|lock| lock.lock())
        .collect::<redlease::Result<Vec<_>>>()?;
    let acquired_in = started.elapsed();
    std::thread::sleep(watchdog * 3);
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    let mut connection = redis::Client::open(url)?.get_connection()?;
    let alive: usize = redis::cmd("EVAL")
        .arg("local n = 0 for i = 0, tonumber(ARGV[1]) - 1 do n = n + redis.call('exists', 'bench:held:' .. i) end return n")
        .arg(0)
        .arg(HELD_LOCKS)
        .query(&mut connection)?;
    let released = Instant::now();
    drop(guards);
    println!(
        "{:<36} acquired in {:.2} s, after {:?} (3 timeouts): {alive} alive, {lost} lost; released in {:.2} s",
        format!("{HELD_LOCKS} held locks, watchdog {watchdog:?}"),
        acquired_in.as_secs_f64(),
        watchdog * 3,
        released.elapsed().as_secs_f64()
    );
    Ok(())
}
