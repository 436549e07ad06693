//! Prints a manager's stats every second while eight threads contend for a few locks.
//!
//! `cargo run --example stats [redis-url]`: without a URL it starts a throwaway
//! `redis-server`. Runs for five seconds.

use std::time::{Duration, Instant};

use redlease::LockManager;
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let manager = LockManager::builder(url.as_str())
        .watchdog_timeout(Duration::from_secs(3))
        .build()?;
    let run_until = Instant::now() + Duration::from_secs(5);
    let workers: Vec<_> = (0..8)
        .map(|worker| {
            let lock = manager.lock(&format!("stats:job:{}", worker % 3));
            std::thread::spawn(move || -> redlease::Result<()> {
                while Instant::now() < run_until {
                    lock.with_lock(|_| std::thread::sleep(Duration::from_millis(2)))?;
                }
                Ok(())
            })
        })
        .collect();
    while Instant::now() < run_until {
        std::thread::sleep(Duration::from_secs(1));
        let stats = manager.stats();
        println!(
            "held {:>2}  waiting {:>2}  acquisitions {:>6}  renewals {:>3} ({} failed)  \
             wait p50 {:>9.3?} p99 {:>9.3?}",
            stats.held,
            stats.waiting,
            stats.acquisitions,
            stats.renewals_sent,
            stats.renewals_failed,
            stats.wait_times.p50,
            stats.wait_times.p99,
        );
    }
    for worker in workers {
        worker.join().expect("worker panicked")?;
    }
    Ok(())
}
