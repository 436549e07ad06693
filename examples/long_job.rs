//! A job that runs longer than the lease: the watchdog keeps the lock until the job is done.
//!
//! The manager uses a 2 s watchdog timeout; the job takes 7 s. Another client polls the lock
//! all along and never gets in; after the job the lock is free at once. The job checks its
//! guard between steps, so it would stop if the lock were lost.
//!
//! `cargo run --example long_job [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::{Duration, Instant};

use redlease::LockManager;
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let watchdog = Duration::from_secs(2);
    let worker = LockManager::builder(url.as_str())
        .watchdog_timeout(watchdog)
        .build()?;
    let rival = LockManager::builder(url.as_str()).build()?;

    let lock = worker.lock("migrations");
    let guard = lock.lock()?;
    println!(
        "job started; lease {watchdog:?}, renewed every {:?}",
        watchdog / 3
    );

    let rival_lock = rival.lock("migrations");
    let rival_thread = std::thread::spawn(move || -> redlease::Result<u32> {
        let mut refused = 0;
        while rival_lock
            .try_lock_for(Duration::from_millis(500))?
            .is_none()
        {
            refused += 1;
        }
        Ok(refused)
    });

    let started = Instant::now();
    for step in 1..=7 {
        std::thread::sleep(Duration::from_secs(1));
        guard.check()?; // stop working if the lock was lost
        println!(
            "step {step}/7 done at {:.1?}; lease left {:?}",
            started.elapsed(),
            lock.remaining_ttl()?.unwrap_or_default()
        );
    }
    guard.unlock()?;
    let refused = rival_thread.join().expect("rival panicked")?;
    println!(
        "job done after {:.1?}; the rival was refused {refused} times, then got the lock",
        started.elapsed()
    );
    Ok(())
}
