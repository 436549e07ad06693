//! Cooperative revocation: a long export holds a lock; an urgent job that needs it asks for
//! it once it has waited 200 ms; the export hears the request between two batches, stops at
//! that safe point and lets go; the urgent job gets the lock.
//!
//! `cargo run --example revocation [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::{Duration, Instant};

use redlease::LockManager;
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let started = Instant::now();
    let exporting = LockManager::builder(url.as_str())
        .on_revocation_request(|notice| println!("(callback: {} was asked to let go)", notice.name))
        .build()?;
    let lock = exporting.lock("example:warehouse");
    let (exporter_in, holding) = crossbeam_channel::bounded(1);
    let export = std::thread::spawn(move || -> redlease::Result<()> {
        let guard = lock.lock()?;
        let asked = guard.revocation_signal();
        let _ = exporter_in.send(());
        for batch in 0.. {
            if asked.try_recv().is_ok() {
                println!(
                    "{:>5.0?} export: asked to let go; stopping after batch {batch}",
                    started.elapsed()
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(50)); // one batch
        }
        guard.unlock()
    });
    holding.recv()?;

    let urgent = LockManager::builder(url.as_str()).build()?;
    let mine = urgent
        .lock("example:warehouse")
        .revoking_after(Duration::from_millis(200)) // ask once it has waited 200 ms
        .lock()?;
    println!("{:>5.0?} urgent job: holds the lock", started.elapsed());
    mine.unlock()?;
    export.join().expect("the export panicked")?;
    Ok(())
}
