//! A counting semaphore: six threads share three permits, so at most three work at once.
//!
//! `cargo run --example semaphore [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redlease::LockManager;
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let manager = LockManager::builder(url.as_str()).build()?;
    let connections = manager.semaphore("example:db-connections");
    connections.try_set_permits(3)?; // only the first caller sets it

    let working = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let (connections, working, most) = (connections.clone(), working.clone(), most.clone());
            std::thread::spawn(move || -> redlease::Result<()> {
                // Woken by releases, not by polling; the guard gives the permit back when
                // dropped (`acquire(1)` and `release(1)` are the counted form).
                let permit = connections.acquire_guarded(1)?;
                let now = working.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
                working.fetch_sub(1, Ordering::SeqCst);
                permit.release()
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker panicked")?;
    }
    println!(
        "6 workers, 3 permits: at most {} worked at once; {} permits free again",
        most.load(Ordering::SeqCst),
        connections.available_permits()?
    );
    Ok(())
}
