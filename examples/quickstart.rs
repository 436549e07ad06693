//! Take a lock, enter it again, look at it from Redis's side, release it.
//!
//! `cargo run --example quickstart [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::Duration;

use redlease::LockManager;
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;

    let manager = LockManager::builder(url.as_str())
        .watchdog_timeout(Duration::from_secs(30))
        .build()?;
    let lock = manager.lock("quickstart:report");

    let guard = lock.lock()?;
    println!(
        "took {:?}: fencing token {}, lease left {:?}",
        lock.name(),
        guard.fencing_token(),
        lock.remaining_ttl()?.unwrap_or_default()
    );
    {
        let _again = lock.lock()?;
        println!(
            "entered again on the same thread: hold count {}",
            lock.hold_count()?
        );
    }
    println!("hold count after the inner guard: {}", lock.hold_count()?);

    // Another thread cannot get in while we hold it.
    let other = lock.clone();
    let got_it = std::thread::spawn(move || -> redlease::Result<bool> {
        Ok(other.try_lock_for(Duration::from_millis(200))?.is_some())
    })
    .join()
    .expect("the other thread panicked")?;
    println!("another thread tried for 200 ms: acquired = {got_it}");

    guard.unlock()?;
    println!("released: locked = {}", lock.is_locked()?);
    manager.shutdown();
    Ok(())
}
