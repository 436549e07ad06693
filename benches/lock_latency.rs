//! Lock latency against the raw Redis round trip, all measured in one run on one server.
//!
//! `cargo bench --bench lock_latency [-- redis-url]`: without a URL it starts a throwaway
//! `redis-server`. Prints the PING round trip, the uncontended lock+unlock pair, the handoff
//! latency between 8 contending threads (release started -> next holder has it), each as a
//! ratio to the round trip, and how the watchdog copes with 100 000 held locks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlease::testing::url_or_throwaway;
use redlease::LockManager;

const ROUND_TRIPS: usize = 20_000;
const PAIRS: usize = 20_000;
const CONTENDERS: usize = 8;
const HANDOFFS_PER_THREAD: usize = 400;
const HELD_LOCKS: usize = 100_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url_argument = std::env::args()
        .skip(1)
        .find(|arg| arg.starts_with("redis"));
    let (url, _server) = url_or_throwaway(url_argument)?;
    let manager = LockManager::builder(&url).build()?;

    let round_trip = Samples::new(measure_round_trips(&url)?);
    println!("{:<36} {}", "round trip (PING)", round_trip.describe(None));

    let pair = Samples::new(measure_pairs(&manager)?);
    println!(
        "{:<36} {}",
        "lock+unlock pair, uncontended",
        pair.describe(Some(&round_trip))
    );

    let handoff = Samples::new(measure_handoffs(&manager)?);
    println!(
        "{:<36} {}",
        format!("handoff, {CONTENDERS} threads"),
        handoff.describe(Some(&round_trip))
    );

    measure_held_locks(&url)?;
    Ok(())
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

fn measure_pairs(manager: &LockManager) -> redlease::Result<Vec<Duration>> {
    let lock = manager.lock("bench:pair");
    for _ in 0..1_000 {
        lock.lock()?.unlock()?;
    }
    (0..PAIRS)
        .map(|_| {
            let started = Instant::now();
            lock.lock()?.unlock()?;
            Ok(started.elapsed())
        })
        .collect()
}

/// Every thread takes the lock, notes when it got it, and notes when it starts releasing;
/// a handoff is the time from one release's start to the next acquisition.
fn measure_handoffs(manager: &LockManager) -> redlease::Result<Vec<Duration>> {
    let release_started: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let handoffs = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            let lock = manager.lock("bench:handoff");
            let release_started = Arc::clone(&release_started);
            let handoffs = Arc::clone(&handoffs);
            std::thread::spawn(move || -> redlease::Result<()> {
                for _ in 0..HANDOFFS_PER_THREAD {
                    let guard = lock.lock()?;
                    let acquired_at = Instant::now();
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
    let samples = std::mem::take(&mut *handoffs.lock());
    Ok(samples)
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

struct Samples {
    sorted: Vec<Duration>,
}

impl Samples {
    fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Samples { sorted: samples }
    }

    fn percentile(&self, percent: usize) -> Duration {
        let index = (self.sorted.len() * percent / 100).min(self.sorted.len().saturating_sub(1));
        self.sorted.get(index).copied().unwrap_or_default()
    }

    fn describe(&self, round_trip: Option<&Samples>) -> String {
        let (p50, p99) = (self.percentile(50), self.percentile(99));
        let micros = |d: Duration| d.as_secs_f64() * 1e6;
        let mut text = format!(
            "n={:<6} p50 {:>8.1} µs  p99 {:>8.1} µs",
            self.sorted.len(),
            micros(p50),
            micros(p99)
        );
        if let Some(round_trip) = round_trip {
            let base = micros(round_trip.percentile(50));
            text.push_str(&format!(
                "   = {:.2} / {:.2} round trips (p50 / p99 over the p50 round trip)",
                micros(p50) / base,
                micros(p99) / base
            ));
        }
        text
    }
}
