//! A fair lock: four threads, each with its own manager (as four processes would be), ask for
//! the lock one after another while it is held, and take it in the order they asked.
//!
//! `cargo run --example fair_lock [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::Duration;

use redlease::LockManager;
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let holder = LockManager::builder(url.as_str()).build()?;
    let mut redis = redis::Client::open(url.as_str())?.get_connection()?;
    let guard = holder.fair_lock("example:ledger").lock()?;
    println!("holder: took the fair lock");

    let (took, order) = crossbeam_channel::unbounded();
    let mut waiters = Vec::new();
    for waiter in 0..4 {
        let manager = LockManager::builder(url.as_str()).build()?;
        let took = took.clone();
        waiters.push(std::thread::spawn(move || -> redlease::Result<()> {
            let guard = manager.fair_lock("example:ledger").lock()?;
            let _ = took.send(waiter);
            std::thread::sleep(Duration::from_millis(20));
            guard.unlock()
        }));
        // The next one asks only once this one is in line.
        while queue_length(&mut redis)? < waiter + 1 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    guard.unlock()?;
    for waiter in waiters {
        waiter.join().expect("a waiter panicked")?;
    }
    drop(took);
    let order: Vec<usize> = order.iter().collect();
    println!("waiters took it in this order: {order:?} (the order they asked in: [0, 1, 2, 3])");
    assert_eq!(order, [0, 1, 2, 3]);
    Ok(())
}

/// How many waiters are in line, in the fair lock's queue (Redisson's layout).
fn queue_length(redis: &mut redis::Connection) -> redis::RedisResult<usize> {
    redis::cmd("LLEN")
        .arg("redisson_lock_queue:{example:ledger}")
        .query(redis)
}
