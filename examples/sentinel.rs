//! Behind Redis Sentinel: the manager asks the sentinels for the master and locks there.
//!
//! `cargo run --example sentinel [sentinel-url master-name]`: without arguments it starts a
//! throwaway `redis-server` and a `redis-sentinel` that monitors it.

use redlease::LockManager;
use redlease_testing::sentinel::{Sentinel, MASTER_NAME};
use redlease_testing::RedisServer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let (_master, _sentinel, sentinel_url, master_name) = match arguments.as_slice() {
        [url, name] => (None, None, url.clone(), name.clone()),
        _ => {
            let master = RedisServer::start()?;
            let sentinel = Sentinel::start(master.port())?;
            println!(
                "started a master at {} and a sentinel at {}",
                master.url(),
                sentinel.url()
            );
            let url = sentinel.url();
            (Some(master), Some(sentinel), url, MASTER_NAME.to_owned())
        }
    };
    let manager = LockManager::builder_sentinel([sentinel_url.as_str()], &master_name).build()?;
    let guard = manager.lock("example:failover-safe").lock()?;
    println!(
        "locked on the master the sentinels name {master_name:?}: token {}",
        guard.fencing_token()
    );
    guard.unlock()?;
    Ok(())
}
