//! How long locks are unavailable around a Sentinel failover, for each setting of replica
//! acknowledgements: none (`without_replica_acks`), a fixed count of two
//! (`replica_acks(2, ...)`), and the replicas connected now (`connected_replica_acks`, the
//! default).
//!
//! Each setting gets a deployment of its own: a master, two replicas, three sentinels
//! (`down-after-milliseconds` 1000, the fixtures'). Four threads of one manager take and let
//! go of eight names (`try_lock`, held 1 ms) for the whole run. After 3 s the master is
//! stopped (SIGSTOP) for 3 s: the sentinels fail it over while it is frozen, and once
//! resumed it finds itself demoted and loads a full copy from the new master. The run goes
//! on for 20 s after the resume. Printed for each setting:
//! - the longest time without any lock granted, from the stop: the time the locks were
//!   unavailable;
//! - when, after the stop, the last gap of over 500 ms ended (from then on, locks were
//!   granted steadily);
//! - when the old master was back in sync (the new master lists two replicas online);
//! - how many replicas acknowledged the locks granted after the stop (`None`: none was
//!   waited for), and the failed tries, by error.
//!
//! `cargo bench --bench failover [-- --runs N]` (one run of the three settings by default,
//! about 100 s).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::number_arg;
use parking_lot::Mutex;
use redlease::{Error, LockManager, LockManagerBuilder};
use redlease_testing::sentinel::{SentinelDeployment, MASTER_NAME};

const WORKERS: usize = 4;
const NAMES: usize = 8;
const WARM_UP: Duration = Duration::from_secs(3);
const STOP: Duration = Duration::from_secs(3);
const AFTER: Duration = Duration::from_secs(20);
/// The default acknowledgements' timeout, for the fixed count too.
const ACK_TIMEOUT: Duration = Duration::from_secs(1);
/// A gap longer than this counts as the locks not being steadily available.
const STEADY_GAP: Duration = Duration::from_millis(500);

#[derive(Clone, Copy, Debug)]
enum Setting {
    None,
    Fixed,
    Connected,
}

impl Setting {
    fn label(self) -> &'static str {
        match self {
            Setting::None => "without_replica_acks",
            Setting::Fixed => "replica_acks(2)",
            Setting::Connected => "connected_replica_acks (default)",
        }
    }

    fn apply(self, builder: LockManagerBuilder) -> LockManagerBuilder {
        match self {
            Setting::None => builder.without_replica_acks(),
            Setting::Fixed => builder.replica_acks(2, ACK_TIMEOUT),
            Setting::Connected => builder.connected_replica_acks(ACK_TIMEOUT),
        }
    }
}

/// What one run of one setting saw, in times from the stop.
struct Outcome {
    longest_gap: Duration,
    steady_from: Duration,
    in_sync_at: Option<Duration>,
    acknowledged: BTreeMap<Option<u32>, u64>,
    errors: BTreeMap<String, u64>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs = number_arg("--runs").unwrap_or(1);
    for run in 1..=runs {
        for setting in [Setting::None, Setting::Fixed, Setting::Connected] {
            let outcome = measure(setting)?;
            report(run, setting, &outcome);
        }
    }
    Ok(())
}

fn report(run: usize, setting: Setting, outcome: &Outcome) {
    let seconds = |d: Duration| format!("{:.1} s", d.as_secs_f64());
    let maybe = |d: Option<Duration>| d.map_or_else(|| "never".to_owned(), seconds);
    println!(
        "run {run} {:<34} unavailable {:>7}  steady from {:>7}  old master in sync {:>7}  \
         acknowledged by {:?}  errors {:?}",
        setting.label(),
        seconds(outcome.longest_gap),
        seconds(outcome.steady_from),
        maybe(outcome.in_sync_at),
        outcome.acknowledged,
        outcome.errors
    );
}

/// One run of `setting` on a deployment of its own.
fn measure(setting: Setting) -> Result<Outcome, Box<dyn std::error::Error>> {
    let deployment = SentinelDeployment::start(2);
    let manager = setting
        .apply(LockManager::builder_sentinel(
            deployment.sentinel_urls(),
            MASTER_NAME,
        ))
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1))
        .watchdog_timeout(Duration::from_secs(6))
        .build()?;
    let grants = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(Mutex::new(BTreeMap::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let (manager, grants, errors, stop) = (
                manager.clone(),
                Arc::clone(&grants),
                Arc::clone(&errors),
                Arc::clone(&stop),
            );
            thread::spawn(move || take_until(&manager, worker, &grants, &errors, &stop))
        })
        .collect();
    thread::sleep(WARM_UP);
    let old_master = deployment.master();
    let old_port = old_master.port();
    old_master.pause()?;
    let stopped = Instant::now();
    thread::sleep(STOP);
    deployment.server_on(old_port).resume()?;
    let in_sync_at = watch_resync(&deployment, old_port, stopped, stopped + STOP + AFTER);
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().expect("worker");
    }
    let mut grants = std::mem::take(&mut *grants.lock());
    grants.sort_unstable();
    let errors = std::mem::take(&mut *errors.lock());
    Ok(outcome(&grants, stopped, in_sync_at, errors))
}

/// Takes random names until `stop`, recording each grant's time (and how many replicas
/// acknowledged it) and each failure's kind.
fn take_until(
    manager: &LockManager,
    worker: usize,
    grants: &Mutex<Vec<(Instant, Option<u32>)>>,
    errors: &Mutex<BTreeMap<String, u64>>,
    stop: &AtomicBool,
) {
    let mut next = worker;
    while !stop.load(Ordering::Relaxed) {
        next = (next * 7 + 3) % NAMES;
        let lock = manager.lock(&format!("failover:{next}"));
        match lock.try_lock() {
            Ok(Some(guard)) => {
                grants
                    .lock()
                    .push((Instant::now(), guard.replicas_acknowledged()));
                thread::sleep(Duration::from_millis(1));
                let _ = guard.unlock();
            }
            Ok(None) => {}
            Err(err) => {
                *errors.lock().entry(kind(&err)).or_default() += 1;
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn kind(err: &Error) -> String {
    let debug = format!("{err:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Watches the deployment until `until`: answers when the new master first listed two
/// replicas online (the old master, on `old_port`, back in sync), from `stopped`.
fn watch_resync(
    deployment: &SentinelDeployment,
    old_port: u16,
    stopped: Instant,
    until: Instant,
) -> Option<Duration> {
    let mut in_sync_at = None;
    while Instant::now() < until {
        if in_sync_at.is_none() {
            let master = deployment
                .sentinels
                .iter()
                .find_map(|sentinel| sentinel.master_port())
                .filter(|port| *port != old_port);
            let online = master.map_or(0, |port| {
                deployment
                    .server_on(port)
                    .command(&["INFO", "replication"])
                    .map_or(0, |info| info.matches("state=online").count())
            });
            if online >= 2 {
                in_sync_at = Some(stopped.elapsed());
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
    in_sync_at
}

/// The figures of a run whose grants (sorted) are `grants`.
fn outcome(
    grants: &[(Instant, Option<u32>)],
    stopped: Instant,
    in_sync_at: Option<Duration>,
    errors: BTreeMap<String, u64>,
) -> Outcome {
    let mut acknowledged = BTreeMap::new();
    let mut after = Vec::new();
    for (grant, replicas) in grants.iter().filter(|(grant, _)| *grant >= stopped) {
        after.push(grant.duration_since(stopped));
        *acknowledged.entry(*replicas).or_default() += 1;
    }
    let mut longest_gap = after.first().copied().unwrap_or(STOP + AFTER);
    let mut steady_from = after.first().copied().unwrap_or(STOP + AFTER);
    for pair in after.windows(2) {
        let gap = pair[1] - pair[0];
        longest_gap = longest_gap.max(gap);
        if gap > STEADY_GAP {
            steady_from = pair[1];
        }
    }
    Outcome {
        longest_gap,
        steady_from,
        in_sync_at,
        acknowledged,
        errors,
    }
}
