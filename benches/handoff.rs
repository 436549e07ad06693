//! Handoffs inside the release, against the floor of the lock's own scripts, all measured in
//! one run on one server: on loopback, and again through a proxy of the test fixtures that
//! delays every request and every answer by 125 µs, where round trips, not thread wake-ups,
//! are the cost.
//!
//! `cargo bench --bench handoff [-- redis-url]`: without a URL it starts a throwaway
//! `redis-server` (a URL given is proxied only when it is a loopback `redis://` address). Prints,
//! for each network:
//! - the raw pair: the plain lock's acquire and release scripts, as the crate assembles them,
//!   sent by hand on one connection; and one script round trip, the median of either script
//!   alone in that pair, the unit of what follows; its p99 is the network's own jitter;
//! - the library's uncontended lock+unlock pair, as a ratio to the raw pair;
//! - handoffs (from the start of a release to the next holder having the lock), in script
//!   round trips: the plain lock between 8 threads of one process (handed on inside the
//!   release), the plain lock between processes (freed, woken, taken), the fair lock between
//!   processes (granted inside the release);
//!
//! and whether the fair handoff's p99 through the proxy stays within 3 round trips. Then, on
//! loopback:
//! - how often 8 threads of one process take and release one lock per second, with handoffs
//!   and without them (`local_handoffs(0)`);
//! - the longest wait of a thread in another process while 4 threads of one process keep the
//!   lock busy, with the bound on handoffs in a row (the default) and without it;
//! - how soon a waiter of another manager that has waited a while takes the lock after its
//!   release, for the lock (woken by pub/sub) and the spin lock (polling with its default
//!   back-off, up to 128 ms, and with one up to 16 ms), and the scripts each waiter makes
//!   Redis run per second of waiting.
//!
//! The processes are this program again (`--contender`), timed on the system's monotonic
//! clock, which every process reads alike.

mod common;

use std::io::Write;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{floor, measure_steps, Samples};
use parking_lot::Mutex;
use redlease::{BackOff, Lock, LockManager};
use redlease_testing::{now_ns, url_or_throwaway, CuttingProxy};

const PAIRS: usize = 20_000;
/// Fewer through the proxy, where a pair takes two of its round trips.
const PROXIED_PAIRS: usize = 2_000;
/// The proxy's delay, each way: with its sleeps' overshoot and its own hops, a round trip of
/// about 0.5 ms on the machine the performance guide's figures come from, a network between
/// hosts of one data centre.
const PROXY_DELAY: Duration = Duration::from_micros(125);
/// The fair handoff's p99 through the proxy, in round trips, that the lock keeps: the grant
/// inside the release, its message and the holder's read of it.
const FAIR_P99_ROUND_TRIPS: f64 = 3.0;
/// A script's own p99 through the proxy, in round trips, above which the machine is too busy
/// for the fair handoff's p99 to tell anything about the lock.
const QUIET_NETWORK_P99: f64 = 1.5;
const THREADS: usize = 8;
const HANDOFFS_PER_THREAD: usize = 400;
const PROCESSES: usize = 4;
const HANDOFFS_PER_PROCESS: usize = 500;
const RATE_RUN: Duration = Duration::from_secs(3);
const STARVATION_RUN: Duration = Duration::from_secs(4);
const BUSY_THREADS: usize = 4;
/// How long the holder keeps the lock while another manager's waiter waits, in each round of
/// the wake measurement: long enough for a spin waiter's pauses to reach their longest.
const HELD_WHILE_WAITED: Duration = Duration::from_millis(400);
const WAKE_ROUNDS: usize = 25;
/// How long a waiter waits on a held lock while the scripts it costs are counted.
const COST_RUN: Duration = Duration::from_secs(3);

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> BenchResult<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "--contender") {
        return contend(&args[at + 1..]);
    }
    let url_argument = args.iter().skip(1).find(|arg| arg.starts_with("redis"));
    let (url, _server) = url_or_throwaway(url_argument.cloned())?;

    println!("== on loopback");
    floors(&url, "bench", PAIRS)?;
    match loopback_port(&url) {
        Some(port) => {
            let proxy = CuttingProxy::start(port)?;
            proxy.set_latency(PROXY_DELAY);
            proxy.set_answer_latency(PROXY_DELAY);
            println!("== through a proxy adding {PROXY_DELAY:?} each way");
            let p99s = floors(&proxy.url(), "bench-proxied", PROXIED_PAIRS)?;
            let verdict = if p99s.script > QUIET_NETWORK_P99 {
                "not judged: the network's own p99 is above 1.5 round trips (a busy machine)"
            } else if p99s.fair <= FAIR_P99_ROUND_TRIPS {
                "kept"
            } else {
                "NOT KEPT"
            };
            println!(
                "fair handoff p99 {:.2} round trips (a script's own p99 {:.2}), floor of \
                 {FAIR_P99_ROUND_TRIPS}: {verdict}",
                p99s.fair, p99s.script
            );
        }
        None => println!("== not proxied: the server is not a loopback redis:// address"),
    }
    println!("== on loopback");
    rates(&url)?;
    for (label, bound) in [("bounded (default)", None), ("unbounded", Some(u32::MAX))] {
        let (longest, taken) = measure_starvation(&url, bound)?;
        println!(
            "{:<40} longest wait {:.1} ms, {taken} acquisitions in {STARVATION_RUN:?}",
            format!("other process vs {BUSY_THREADS} busy threads, {label}"),
            longest.as_secs_f64() * 1e3
        );
    }
    let mut wake_p50s = Vec::new();
    for kind in ["plain", "spin", "spin-16ms"] {
        let wakes = measure_wakes(&url, kind)?;
        let per_second = waiting_cost(&url, kind)?;
        println!(
            "{:<40} {}  {per_second:.1} scripts per second of waiting",
            format!("wake, {}", kind_label(kind)),
            wakes.describe(None),
        );
        wake_p50s.push(wakes.percentile(50));
    }
    println!(
        "{:<40} {:.1}x and {:.1}x the lock's (p50)",
        "  the spin locks' wakes",
        ratio(wake_p50s[1], wake_p50s[0]),
        ratio(wake_p50s[2], wake_p50s[0])
    );
    Ok(())
}

fn kind_label(kind: &str) -> &'static str {
    match kind {
        "spin" => "spin lock, default back-off",
        "spin-16ms" => "spin lock, back-off up to 16 ms",
        _ => "lock (pub/sub)",
    }
}

/// The lock `name` of `kind`: `plain`, `fair`, `spin` (with the default back-off, up to
/// 128 ms) or `spin-16ms` (from 1 ms up to 16 ms).
fn lock_of(manager: &LockManager, kind: &str, name: &str) -> Lock {
    let up_to =
        |max_ms| BackOff::exponential(Duration::from_millis(1), Duration::from_millis(max_ms));
    match kind {
        "fair" => manager.fair_lock(name),
        "spin" => manager.spin_lock(name, BackOff::default()),
        "spin-16ms" => manager.spin_lock(name, up_to(16).expect("a valid back-off")),
        _ => manager.lock(name),
    }
}

/// From the start of a release to the acquisition by a waiter of another manager, which has
/// waited [`HELD_WHILE_WAITED`] by then, over [`WAKE_ROUNDS`] rounds, on a lock of `kind`.
fn measure_wakes(url: &str, kind: &str) -> BenchResult<Samples> {
    let holder = LockManager::builder(url).build()?;
    let waiter = LockManager::builder(url).build()?;
    let name = format!("bench:wake:{kind}");
    let (holding, waiting) = (lock_of(&holder, kind, &name), lock_of(&waiter, kind, &name));
    let mut wakes = Vec::new();
    for _ in 0..WAKE_ROUNDS {
        let guard = holding.lock()?;
        let waiting = waiting.clone();
        let taker = std::thread::spawn(move || -> redlease::Result<Instant> {
            let guard = waiting.lock()?;
            let taken_at = Instant::now();
            guard.unlock()?;
            Ok(taken_at)
        });
        std::thread::sleep(HELD_WHILE_WAITED);
        let released_at = Instant::now();
        guard.unlock()?;
        let taken_at = taker.join().expect("waiter panicked")?;
        wakes.push(taken_at - released_at);
    }
    Ok(Samples::new(wakes))
}

/// The scripts Redis runs per second for one waiter of `kind` on a held lock (the holder's
/// renewals, one per 10 s, fall outside the run).
fn waiting_cost(url: &str, kind: &str) -> BenchResult<f64> {
    let holder = LockManager::builder(url).build()?;
    let waiter = LockManager::builder(url).build()?;
    let name = format!("bench:cost:{kind}");
    let guard = lock_of(&holder, kind, &name).lock()?;
    let before = script_calls(url)?;
    let waited = lock_of(&waiter, kind, &name).try_lock_for(COST_RUN)?;
    let calls = script_calls(url)? - before;
    assert!(waited.is_none(), "the lock was held");
    guard.unlock()?;
    Ok(calls as f64 / COST_RUN.as_secs_f64())
}

/// The port of a `redis://` URL on loopback, which the proxy can stand in front of.
fn loopback_port(url: &str) -> Option<u16> {
    let rest = url.strip_prefix("redis://")?;
    let authority = rest.split('/').next()?;
    let host_port = authority.rsplit('@').next()?;
    let (host, port) = host_port.rsplit_once(':')?;
    matches!(host, "127.0.0.1" | "localhost")
        .then(|| port.parse().ok())
        .flatten()
}

/// The p99s of a network, in its round trips (the median of a script alone).
struct P99s {
    /// A script alone: the network's own jitter.
    script: f64,
    /// The fair lock's handoff between processes.
    fair: f64,
}

/// The raw pair, the library's pair and the handoffs on the server at `url`, with names
/// under `prefix`, `pairs` pairs of each.
fn floors(url: &str, prefix: &str, pairs: usize) -> BenchResult<P99s> {
    let manager = LockManager::builder(url).build()?;
    let (raw_pair, script) = measure_raw_pair(url, &format!("{prefix}:raw"), pairs)?;
    let script_rt = script.percentile(50);
    println!(
        "{:<40} {}  p99 = {:.2} round trips",
        "script round trip (either script)",
        script.describe(None),
        ratio(script.percentile(99), script_rt)
    );
    println!(
        "{:<40} {}",
        "raw pair (the two scripts by hand)",
        raw_pair.describe(None)
    );
    let pair_lock = manager.lock(&format!("{prefix}:pair"));
    let pair = Samples::new(measure_steps(pairs, || pair_lock.lock()?.unlock())?);
    println!(
        "{:<40} {}  = {:.2}x the raw pair (p50)",
        "library lock+unlock pair",
        pair.describe(None),
        ratio(pair.percentile(50), raw_pair.percentile(50))
    );

    let local = Samples::new(measure_threads(
        &manager.lock(&format!("{prefix}:handoff")),
    )?);
    print_handoffs(
        &format!("handoff, {THREADS} threads, 1 process"),
        &local,
        script_rt,
    );
    println!(
        "{:<40} {}",
        "  of which handed on inside the release",
        manager.stats().handoffs
    );
    let unhanded = LockManager::builder(url).local_handoffs(0).build()?;
    let freed = Samples::new(measure_threads(&unhanded.lock(&format!("{prefix}:freed")))?);
    print_handoffs("  the same without handoffs", &freed, script_rt);
    let between = Samples::new(measure_processes(
        url,
        "plain",
        &format!("{prefix}:between"),
    )?);
    print_handoffs(
        &format!("handoff, {PROCESSES} processes"),
        &between,
        script_rt,
    );
    let fair = Samples::new(measure_processes(url, "fair", &format!("{prefix}:fair"))?);
    print_handoffs(
        &format!("fair handoff, {PROCESSES} processes"),
        &fair,
        script_rt,
    );
    Ok(P99s {
        script: ratio(script.percentile(99), script_rt),
        fair: ratio(fair.percentile(99), script_rt),
    })
}

/// Acquisitions per second of 8 threads on one lock, with handoffs and without, and the
/// scripts Redis ran for each.
fn rates(url: &str) -> BenchResult<()> {
    let scripts_before = script_calls(url)?;
    let with = acquisitions_per_second(&LockManager::builder(url).build()?)?;
    let scripts_between = script_calls(url)?;
    let without = LockManager::builder(url).local_handoffs(0).build()?;
    let without = acquisitions_per_second(&without)?;
    let scripts_after = script_calls(url)?;
    let per = |calls: u64, rate: f64| calls as f64 / (rate * RATE_RUN.as_secs_f64());
    println!(
        "{:<40} {with:.0}/s with handoffs, {without:.0}/s without = {:.2}x",
        format!("{THREADS} threads, 1 lock"),
        with / without
    );
    println!(
        "{:<40} {:.2} with handoffs, {:.2} without",
        "  scripts run by Redis per acquisition",
        per(scripts_between - scripts_before, with),
        per(scripts_after - scripts_between, without)
    );
    Ok(())
}

fn print_handoffs(label: &str, handoffs: &Samples, script_rt: Duration) {
    println!(
        "{label:<40} {}  = {:.2} / {:.2} script round trips (p50 / p99)",
        handoffs.describe(None),
        ratio(handoffs.percentile(50), script_rt),
        ratio(handoffs.percentile(99), script_rt)
    );
}

fn ratio(value: Duration, base: Duration) -> f64 {
    value.as_secs_f64() / base.as_secs_f64().max(1e-9)
}

/// The plain lock's two scripts as the crate assembles them, sent by hand on one connection
/// on the lock `name`, `pairs` times: the pairs, and each script alone.
fn measure_raw_pair(url: &str, name: &str, pairs: usize) -> redis::RedisResult<(Samples, Samples)> {
    let mut connection = redis::Client::open(url)?.get_connection()?;
    let lock = floor::PlainLock::new(&mut connection)?;
    let mut round = 0u64;
    let mut pair = || -> redis::RedisResult<(Duration, Duration)> {
        round += 1;
        let holder = format!("raw:{round}");
        let started = Instant::now();
        lock.acquire(name, &holder)
            .invoke::<(i64, i64)>(&mut connection)?;
        let acquired = Instant::now();
        lock.release(name, &holder, round)
            .invoke::<i64>(&mut connection)?;
        Ok((acquired - started, acquired.elapsed()))
    };
    for _ in 0..pairs / 20 {
        pair()?;
    }
    let (mut samples, mut scripts) = (Vec::new(), Vec::new());
    for _ in 0..pairs {
        let (acquire, release) = pair()?;
        samples.push(acquire + release);
        scripts.extend([acquire, release]);
    }
    Ok((Samples::new(samples), Samples::new(scripts)))
}

/// A short critical section, so that the others are all waiting.
fn hold_briefly(since: Instant) {
    while since.elapsed() < Duration::from_micros(50) {
        std::hint::spin_loop();
    }
}

/// Handoffs between `THREADS` threads of one process: from the start of one release to the
/// next acquisition.
fn measure_threads(lock: &Lock) -> redlease::Result<Vec<Duration>> {
    let release_started: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let handoffs = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (lock, release_started) = (lock.clone(), Arc::clone(&release_started));
            let handoffs = Arc::clone(&handoffs);
            std::thread::spawn(move || -> redlease::Result<()> {
                for _ in 0..HANDOFFS_PER_THREAD {
                    let guard = lock.lock()?;
                    let acquired_at = Instant::now();
                    if let Some(released_at) = release_started.lock().take() {
                        handoffs.lock().push(acquired_at - released_at);
                    }
                    hold_briefly(acquired_at);
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
    let handoffs = std::mem::take(&mut *handoffs.lock());
    Ok(handoffs)
}

/// Handoffs between `PROCESSES` processes of one thread each, on a lock of `kind`: each
/// records when it took the lock and when it started releasing it; sorted by acquisition,
/// each acquisition by another process than the last holder's is a handoff.
fn measure_processes(url: &str, kind: &str, name: &str) -> BenchResult<Vec<Duration>> {
    let dir = std::env::temp_dir();
    let files: Vec<_> = (0..PROCESSES)
        .map(|index| dir.join(format!("redlease-handoff-{}-{index}", std::process::id())))
        .collect();
    let count = HANDOFFS_PER_PROCESS.to_string();
    let children: Vec<Child> = files
        .iter()
        .map(|file| {
            let file = file.to_str().expect("a UTF-8 temp path");
            contender(&[url, kind, name, &count, file])
        })
        .collect::<std::io::Result<_>>()?;
    finish(children)?;
    let mut events: Vec<(u64, u64, usize)> = Vec::new();
    let mut handed = 0;
    for (process, file) in files.iter().enumerate() {
        for line in std::fs::read_to_string(file)?.lines() {
            if let Some(count) = line.strip_prefix("handed ") {
                handed += count.parse::<u64>()?;
            }
            let mut times = line.split(' ').map(str::parse::<u64>);
            if let (Some(Ok(acquired)), Some(Ok(released))) = (times.next(), times.next()) {
                events.push((acquired, released, process));
            }
        }
        std::fs::remove_file(file)?;
    }
    events.sort_unstable();
    println!(
        "{:<40} {handed}",
        format!("  ({kind}: acquisitions handed inside the release)")
    );
    Ok(events
        .windows(2)
        .filter(|pair| pair[0].2 != pair[1].2)
        .map(|pair| Duration::from_nanos(pair[1].0.saturating_sub(pair[0].1)))
        .collect())
}

fn contender(args: &[&str]) -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .arg("--contender")
        .args(args)
        .spawn()
}

fn finish(children: Vec<Child>) -> BenchResult<()> {
    for mut child in children {
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("a contender process failed: {status}").into());
        }
    }
    Ok(())
}

/// A contender process: `<url> <plain|fair|wait> <name> <count or ms> <file>`. Takes and
/// releases the lock `count` times, writing `<acquired> <release started>` (monotonic ns) per
/// line; or, for `wait`, takes it again and again for `ms` and writes its longest wait and how
/// many times it took it.
fn contend(args: &[String]) -> BenchResult<()> {
    let [url, kind, name, count, file] = args else {
        return Err("usage: --contender <url> <plain|fair|wait> <name> <count> <file>".into());
    };
    let manager = LockManager::builder(url.as_str()).build()?;
    let lock = lock_of(&manager, kind, name);
    let count: u64 = count.parse()?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(file)?);
    if kind == "wait" {
        let (longest, taken) = wait_repeatedly(&lock, Duration::from_millis(count))?;
        writeln!(out, "{} {taken}", longest.as_nanos())?;
        return Ok(out.flush()?);
    }
    for _ in 0..count {
        let guard = lock.lock()?;
        let acquired = now_ns();
        hold_briefly(Instant::now());
        let released = now_ns();
        guard.unlock()?;
        writeln!(out, "{acquired} {released}")?;
    }
    writeln!(out, "handed {}", manager.stats().handoffs)?;
    Ok(out.flush()?)
}

/// Takes and releases `lock` again and again for `run`: the longest wait, and how many times.
fn wait_repeatedly(lock: &Lock, run: Duration) -> redlease::Result<(Duration, u64)> {
    let started = Instant::now();
    let (mut longest, mut taken) = (Duration::ZERO, 0);
    while started.elapsed() < run {
        let asked = Instant::now();
        let guard = lock.lock()?;
        longest = longest.max(asked.elapsed());
        taken += 1;
        hold_briefly(Instant::now());
        guard.unlock()?;
    }
    Ok((longest, taken))
}

/// How many scripts the server has run so far (`EVALSHA` and `EVAL` calls).
fn script_calls(url: &str) -> redis::RedisResult<u64> {
    let mut connection = redis::Client::open(url)?.get_connection()?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut connection)?;
    Ok(info
        .lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| line.split("calls=").nth(1))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum())
}

/// Take+release pairs per second of `THREADS` threads of one process on one lock.
fn acquisitions_per_second(manager: &LockManager) -> redlease::Result<f64> {
    let lock = manager.lock("bench:rate");
    let done = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (lock, done, taken) = (lock.clone(), Arc::clone(&done), Arc::clone(&taken));
            std::thread::spawn(move || -> redlease::Result<()> {
                while !done.load(Ordering::Relaxed) {
                    lock.lock()?.unlock()?;
                    taken.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(RATE_RUN);
    done.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("contender panicked")?;
    }
    Ok(taken.load(Ordering::Relaxed) as f64 / RATE_RUN.as_secs_f64())
}

/// The longest wait of a thread in another process, and how often it took the lock, while
/// `BUSY_THREADS` threads of this process keep the lock busy (with `bound` handoffs in a row,
/// or the default).
fn measure_starvation(url: &str, bound: Option<u32>) -> BenchResult<(Duration, u64)> {
    let mut builder = LockManager::builder(url);
    if let Some(bound) = bound {
        builder = builder.local_handoffs(bound);
    }
    let manager = builder.build()?;
    let lock = manager.lock("bench:starve");
    let file = std::env::temp_dir().join(format!("redlease-starve-{}", std::process::id()));
    let file_path = file.to_str().expect("a UTF-8 temp path");
    let run_ms = STARVATION_RUN.as_millis().to_string();
    let other = contender(&[url, "wait", "bench:starve", &run_ms, file_path])?;
    let started = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..BUSY_THREADS)
        .map(|_| {
            let (lock, done) = (lock.clone(), Arc::clone(&done));
            std::thread::spawn(move || -> redlease::Result<()> {
                while !done.load(Ordering::Relaxed) {
                    let guard = lock.lock()?;
                    hold_briefly(Instant::now());
                    guard.unlock()?;
                }
                Ok(())
            })
        })
        .collect();
    // The busy threads stop after the run: a wait of the other process's that they kept
    // going until then ends there.
    std::thread::sleep(STARVATION_RUN.saturating_sub(started.elapsed()));
    done.store(true, Ordering::Relaxed);
    for thread in busy {
        thread.join().expect("busy thread panicked")?;
    }
    finish(vec![other])?;
    let report = std::fs::read_to_string(&file)?;
    std::fs::remove_file(&file)?;
    let mut words = report.split_whitespace().map(str::parse::<u64>);
    match (words.next(), words.next()) {
        (Some(Ok(longest)), Some(Ok(taken))) => Ok((Duration::from_nanos(longest), taken)),
        _ => Err(format!("the waiting process reported {report:?}").into()),
    }
}
