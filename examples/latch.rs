//! A count-down latch: a coordinator waits until four loaders, each on its own manager (as
//! separate processes would be), have counted down.
//!
//! `cargo run --example latch [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::Duration;

use redlease::LockManager;
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let coordinator = LockManager::builder(url.as_str()).build()?;
    let loaded = coordinator.count_down_latch("example:shards-loaded");
    loaded.try_set_count(4)?;

    let loaders: Vec<_> = (0..4u64)
        .map(|shard| {
            let url = url.clone();
            std::thread::spawn(move || -> redlease::Result<()> {
                let manager = LockManager::builder(url.as_str()).build()?;
                std::thread::sleep(Duration::from_millis(100 * (shard + 1)));
                println!("shard {shard} loaded");
                manager
                    .count_down_latch("example:shards-loaded")
                    .count_down()
            })
        })
        .collect();
    let open = loaded.wait_for(Duration::from_secs(10))?; // woken by pub/sub at zero
    println!("all shards loaded: {open}; count now {}", loaded.count()?);
    for loader in loaders {
        loader.join().expect("a loader panicked")?;
    }
    Ok(())
}
