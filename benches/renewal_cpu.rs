//! What keeping locks costs: holds N locks under a short watchdog and reports this process's
//! CPU per renewal and per lock-second, with Redis's own CPU (`INFO cpu`) beside it.
//!
//! `cargo bench --bench renewal_cpu` holds 10 000 and then 100 000 locks on a throwaway
//! server for 9 s each under a 3 s watchdog (a renewal every second per lock);
//! `-- --locks 30000 --cluster` holds them on a throwaway cluster of three masters instead;
//! `-- --seconds 20` holds longer. The locks are taken first (not counted), then the window
//! is measured: the process's user and system CPU (`getrusage`), the renewals sent and
//! failed, the batches, and Redis's CPU over the same window.

use std::time::{Duration, Instant};

use redlease::LockManager;
use redlease_testing::{RedisCluster, RedisServer};

mod common;

use common::number_arg;

const WATCHDOG: Duration = Duration::from_secs(3);

struct Options {
    locks: Vec<usize>,
    seconds: u64,
    cluster: bool,
}

fn options() -> Options {
    Options {
        locks: number_arg("--locks").map_or(vec![10_000, 100_000], |locks| vec![locks]),
        seconds: number_arg("--seconds").map_or(9, |seconds| seconds as u64),
        cluster: std::env::args().any(|arg| arg == "--cluster"),
    }
}

/// The CPU this process has used so far (user + system).
fn process_cpu() -> Duration {
    // SAFETY: getrusage with RUSAGE_SELF writes the struct it is given, nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |value: libc::timeval| {
        Duration::from_secs(value.tv_sec as u64) + Duration::from_micros(value.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The CPU `server` has used so far (`used_cpu_user` + `used_cpu_sys` of `INFO cpu`).
fn server_cpu(server: &RedisServer) -> Duration {
    let info = server.command(&["INFO", "cpu"]).unwrap_or_default();
    let seconds: f64 = info
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            matches!(name, "used_cpu_user" | "used_cpu_sys")
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum();
    Duration::from_secs_f64(seconds)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options();
    let mut servers: Vec<RedisServer> = Vec::new();
    let _cluster;
    let manager = if options.cluster {
        let cluster = RedisCluster::start(3, 0)?;
        let manager = LockManager::builder_cluster(cluster.seed_urls())
            .watchdog_timeout(WATCHDOG)
            .build()?;
        _cluster = Some(cluster);
        manager
    } else {
        let server = RedisServer::start()?;
        let manager = LockManager::builder(server.url())
            .watchdog_timeout(WATCHDOG)
            .build()?;
        servers.push(server);
        _cluster = None;
        manager
    };
    let nodes: Vec<&RedisServer> = match &_cluster {
        Some(cluster) => cluster.masters()?,
        None => servers.iter().collect(),
    };
    for &count in &options.locks {
        hold(&manager, &nodes, count, options.seconds)?;
    }
    Ok(())
}

/// Takes `count` locks, holds them for `seconds`, and reports the window's figures.
fn hold(
    manager: &LockManager,
    nodes: &[&RedisServer],
    count: usize,
    seconds: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let guards: Vec<_> = (0..count)
        .map(|index| manager.lock(&format!("renewal-cpu:{index}")).lock())
        .collect::<redlease::Result<_>>()?;
    let taken_in = started.elapsed();
    // One renewal interval first, so that the window begins in the steady state.
    std::thread::sleep(WATCHDOG / 3);
    let before = manager.stats();
    let (cpu_before, server_before) = (process_cpu(), nodes.iter().map(|node| server_cpu(node)));
    let server_before: Duration = server_before.sum();
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let elapsed = window.elapsed();
    let cpu = process_cpu() - cpu_before;
    let server: Duration =
        nodes.iter().map(|node| server_cpu(node)).sum::<Duration>() - server_before;
    let after = manager.stats();
    let renewals = after.renewals_sent - before.renewals_sent;
    let failed = after.renewals_failed - before.renewals_failed;
    let batches = after.renewal_batches - before.renewal_batches;
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    let lock_seconds = count as f64 * elapsed.as_secs_f64();
    println!(
        "{count} locks ({} in {taken_in:.1?}), {elapsed:.1?} under a {WATCHDOG:?} watchdog: \
         {renewals} renewals in {batches} batches, {failed} failed, {lost} lost",
        if nodes.len() > 1 {
            "3 masters"
        } else {
            "1 server"
        },
    );
    println!(
        "  client CPU {cpu:.3?} = {:.2} µs a renewal, {:.2} µs a lock-second ({:.1} % of a core)",
        cpu.as_secs_f64() * 1e6 / renewals.max(1) as f64,
        cpu.as_secs_f64() * 1e6 / lock_seconds,
        100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64(),
    );
    println!(
        "  Redis CPU  {server:.3?} = {:.2} µs a renewal ({:.1} % of a core)",
        server.as_secs_f64() * 1e6 / renewals.max(1) as f64,
        100.0 * server.as_secs_f64() / elapsed.as_secs_f64(),
    );
    drop(guards);
    Ok(())
}
