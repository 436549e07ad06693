//! The upgradable read of a read-write lock: a checker reads the stock beside plain readers,
//! finds it must restock, and upgrades to the write lock once the readers are gone, with no
//! writer coming in between; a writer that asked meanwhile waits for it.
//!
//! `cargo run --example upgradable_read [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::{Duration, Instant};

use redlease::LockManager;
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let manager = LockManager::builder(url.as_str()).build()?;
    let stock = manager.read_write_lock("example:stock");
    let started = Instant::now();
    let say = |what: &str| println!("{:>5.0?} {what}", started.elapsed());

    let checking = stock.upgradable().lock()?;
    say("checker: reading, upgradable");
    let (reading, reader_in) = crossbeam_channel::bounded(1);
    let reader = std::thread::spawn({
        let stock = stock.clone();
        move || -> redlease::Result<()> {
            let guard = stock.read().lock()?; // plain readers still share the lock
            let _ = reading.send(());
            std::thread::sleep(Duration::from_millis(300));
            guard.unlock()
        }
    });
    reader_in.recv()?;
    say("reader: reading beside it");
    let writer = std::thread::spawn({
        let stock = stock.clone();
        move || -> redlease::Result<Instant> {
            let guard = stock.write().lock()?; // waits for the checker too
            let entered = Instant::now();
            guard.unlock()?;
            Ok(entered)
        }
    });

    let writing = checking.upgrade()?; // waits for the reader, then excludes everyone
    let upgraded = Instant::now();
    say("checker: upgraded once the reader left; restocking");
    checking.downgrade(writing)?;
    say("checker: back to reading");
    checking.unlock()?;
    reader.join().expect("the reader panicked")?;
    let writer_entered = writer.join().expect("the writer panicked")?;
    assert!(
        writer_entered > upgraded,
        "the writer came in before the upgrade"
    );
    say("writer: in, after the checker let go");
    Ok(())
}
