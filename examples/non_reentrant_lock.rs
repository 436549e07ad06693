//! A non-reentrant lock: the thread that holds it is refused a second hold at once (where the
//! reentrant lock would count a level), while another thread waits for it as for any lock.
//!
//! `cargo run --example non_reentrant_lock [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::Duration;

use redlease::{Error, LockManager};
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let manager = LockManager::builder(url.as_str()).build()?;
    let migration = manager.non_reentrant_lock("example:schema-migration");

    let guard = migration.lock()?;
    match migration.try_lock_for(Duration::from_secs(5)) {
        Err(Error::AlreadyHeld { name }) => {
            println!("a second hold of {name:?} by its holder: refused at once")
        }
        other => return Err(format!("expected AlreadyHeld, got {other:?}").into()),
    }

    let other = migration.clone();
    let waiter = std::thread::spawn(move || -> redlease::Result<()> {
        let guard = other.lock()?; // waits, woken by the release
        println!("another thread: took it once it was free");
        guard.unlock()
    });
    std::thread::sleep(Duration::from_millis(100));
    guard.unlock()?;
    waiter.join().expect("the waiter panicked")?;
    Ok(())
}
