//! A spin lock: waiters on many names at once, each polling with a back-off instead of
//! subscribing to its lock's releases, so the manager holds no subscription however many
//! names it waits on; each takes its lock at its next try after the release.
//!
//! `cargo run --example spin_lock [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::{Duration, Instant};

use redlease::{BackOff, LockManager};
use redlease_testing::url_or_throwaway;

const SHARDS: usize = 50;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let owner = LockManager::builder(url.as_str()).build()?;
    let worker = LockManager::builder(url.as_str()).build()?;
    let back_off = BackOff::exponential(Duration::from_millis(2), Duration::from_millis(100))?;

    // Another process (here, another manager) holds every shard.
    let held = (0..SHARDS)
        .map(|shard| owner.lock(&format!("example:shard:{shard}")).lock())
        .collect::<redlease::Result<Vec<_>>>()?;
    let waiters: Vec<_> = (0..SHARDS)
        .map(|shard| {
            let lock = worker.spin_lock(&format!("example:shard:{shard}"), back_off);
            std::thread::spawn(move || -> redlease::Result<()> {
                let guard = lock.lock()?; // polls, spaced by the back-off
                guard.unlock()
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while worker.stats().waiting < SHARDS {
        if Instant::now() > deadline {
            return Err("the waiters did not all start waiting".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "{} threads wait on {SHARDS} names, with {} subscriptions",
        worker.stats().waiting,
        worker.subscribed_channels()
    );
    let released_at = Instant::now();
    drop(held);
    for waiter in waiters {
        waiter.join().expect("a waiter panicked")?;
    }
    println!(
        "every shard taken within {:?} of the releases",
        released_at.elapsed()
    );
    Ok(())
}
