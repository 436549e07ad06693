//! A permit-expirable semaphore: each permit has an id and a lease. A holder that vanishes
//! without giving its permit back (here: a fixed lease nobody releases) loses it when the
//! lease ends, and the waiting thread gets it then.
//!
//! `cargo run --example permit_semaphore [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::{Duration, Instant};

use redlease::LockManager;
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let manager = LockManager::builder(url.as_str()).build()?;
    let renderers = manager.permit_semaphore("example:render-workers");
    renderers.try_set_permits(1)?;

    // A holder that takes the only permit for 1 s and forgets it.
    let forgotten = renderers.leased_for(Duration::from_secs(1)).lock()?;
    println!("permit {} taken with a 1 s lease", forgotten.permit_id());
    std::mem::forget(forgotten); // as a process that died would

    let started = Instant::now();
    let permit = renderers.lock()?; // kept by the watchdog while the guard lives
    println!(
        "the next holder got permit {} after {:.1?}: the forgotten one ran out",
        permit.permit_id(),
        started.elapsed()
    );
    permit.unlock()?;
    Ok(())
}
