//! The demo: worker threads take turns on a shared counter kept in Redis.
//!
//! Each worker reads the counter, thinks for a moment, and writes it back plus one: a race
//! that loses updates without a lock. Under a `redlease` lock every increment lands.
//!
//! `cargo run --example workers [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::{Duration, Instant};

use redis::Commands;
use redlease::LockManager;
use redlease_testing::url_or_throwaway;

const WORKERS: usize = 8;
const INCREMENTS: usize = 50;
const COUNTER_KEY: &str = "demo:counter";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let manager = LockManager::builder(url.as_str()).build()?;
    let mut redis = redis::Client::open(url.as_str())?.get_connection()?;
    let _: () = redis.set(COUNTER_KEY, 0)?;

    let started = Instant::now();
    std::thread::scope(|scope| {
        for worker in 0..WORKERS {
            let lock = manager.lock("demo:counter-lock");
            let url = url.clone();
            scope.spawn(
                move || -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
                    let mut redis = redis::Client::open(url.as_str())?.get_connection()?;
                    for _ in 0..INCREMENTS {
                        let guard = lock.lock()?; // released when `guard` goes out of scope
                        let value: u64 = redis.get(COUNTER_KEY)?;
                        std::thread::sleep(Duration::from_micros(100));
                        let _: () = redis.set(COUNTER_KEY, value + 1)?;
                        drop(guard);
                    }
                    println!("worker {worker} done");
                    Ok(())
                },
            );
        }
    });
    let total: u64 = redis.get(COUNTER_KEY)?;
    let expected = WORKERS * INCREMENTS;
    println!(
        "counter = {total} (expected {expected}) after {} locked increments in {:.2?}",
        expected,
        started.elapsed()
    );
    manager.shutdown();
    if total as usize != expected {
        return Err("lost updates: the lock did not exclude".into());
    }
    Ok(())
}
