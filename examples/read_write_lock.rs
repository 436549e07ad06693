//! A read-write lock: three readers hold it together; a writer waits until the last of them
//! lets go, and then holds it alone.
//!
//! `cargo run --example read_write_lock [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::{Duration, Instant};

use redlease::LockManager;
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let manager = LockManager::builder(url.as_str()).build()?;
    let prices = manager.read_write_lock("example:price-table");
    let started = Instant::now();

    let (reading, readers_in) = crossbeam_channel::unbounded();
    let readers: Vec<_> = (0..3)
        .map(|reader| {
            let (prices, reading) = (prices.clone(), reading.clone());
            std::thread::spawn(move || -> redlease::Result<()> {
                let guard = prices.read().lock()?;
                println!("{:>5.0?} reader {reader}: reading", started.elapsed());
                let _ = reading.send(());
                std::thread::sleep(Duration::from_millis(300));
                guard.unlock()
            })
        })
        .collect();
    for _ in 0..3 {
        readers_in.recv()?; // the readers are in
    }
    let writer = prices.write().lock()?;
    println!(
        "{:>5.0?} writer: alone, once every reader let go",
        started.elapsed()
    );
    writer.unlock()?;
    for reader in readers {
        reader.join().expect("a reader panicked")?;
    }
    Ok(())
}
