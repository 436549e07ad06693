//! Redlock over five independent Redis servers: the lock is taken on a majority of them, and
//! stays held (and renewed) with two of the five frozen.
//!
//! `cargo run --example redlock [redis-url ...]`: without URLs it starts five throwaway
//! `redis-server`s on free local ports (and freezes two of them with SIGSTOP).

use std::time::Duration;

use redlease::{LockManager, RedLock};
use redlease_testing::RedisServer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let given: Vec<String> = std::env::args().skip(1).collect();
    let servers: Vec<RedisServer> = match given.is_empty() {
        true => (0..5)
            .map(|_| RedisServer::start())
            .collect::<Result<_, _>>()?,
        false => Vec::new(),
    };
    let urls: Vec<String> = match given.is_empty() {
        true => servers.iter().map(RedisServer::url).collect(),
        false => given,
    };
    let managers = urls
        .iter()
        .map(|url| {
            LockManager::builder(url.as_str())
                .connect_timeout(Duration::from_millis(200))
                .response_timeout(Duration::from_millis(200))
                .watchdog_timeout(Duration::from_secs(3))
                .build()
        })
        .collect::<redlease::Result<Vec<_>>>()?;
    let redlock = RedLock::from_managers(&managers, "example:nightly-billing")?;

    let guard = redlock.lock()?;
    println!(
        "held on {} of {} servers, fencing token {}",
        guard.held_members(),
        urls.len(),
        guard.fencing_token()
    );
    for server in servers.iter().take(2) {
        server.pause()?;
        println!("froze the server at {}", server.url());
    }
    std::thread::sleep(Duration::from_secs(4)); // past one lease: only renewals keep it
    println!(
        "after a lease's time with two servers frozen: lost = {}, held on {}",
        guard.is_lost(),
        guard.held_members()
    );
    for server in servers.iter().take(2) {
        server.resume()?;
    }
    guard.unlock()?;
    Ok(())
}
