//! On a Redis Cluster: locks on names in every master's slots, each taken on the master of its
//! name's slot, and a name with a hash tag whose keys stay in one slot.
//!
//! `cargo run --example cluster [seed-url ...]`: without URLs it starts a throwaway cluster of
//! three masters (`redis-server` and `redis-cli --cluster create`).

use redlease::LockManager;
use redlease_testing::RedisCluster;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let given: Vec<String> = std::env::args().skip(1).collect();
    let cluster = match given.is_empty() {
        true => Some(RedisCluster::start(3, 0)?),
        false => None,
    };
    let seeds = match &cluster {
        Some(cluster) => cluster.seed_urls(),
        None => given,
    };
    let manager = LockManager::builder_cluster(seeds.iter().map(String::as_str)).build()?;
    let guards = ["orders", "invoices", "refunds", "{tenant-7}:export"]
        .into_iter()
        .map(|name| manager.lock(name).lock())
        .collect::<redlease::Result<Vec<_>>>()?;
    for guard in &guards {
        let name = guard.lock().name();
        match &cluster {
            Some(cluster) => println!(
                "{name:?} held on the master at port {}",
                cluster.master_of_key(name)?.port()
            ),
            None => println!("{name:?} held"),
        }
    }
    drop(guards);
    Ok(())
}
