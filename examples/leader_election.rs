//! Leader election: three instances (each a manager of its own, as three processes would
//! be) campaign for "scheduler"; one leads at a time, resigns after a few rounds of work, and
//! the next takes over. An observer prints every change as it happens.
//!
//! `cargo run --example leader_election [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::Duration;

use redlease::{LeaderChange, LockManager};
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let observing = LockManager::builder(url.as_str()).build()?;
    let mut observer = observing.leader_election("example:scheduler").observe()?;

    let instances: Vec<_> = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|host| {
            let manager = LockManager::builder(url.as_str()).build()?;
            Ok(std::thread::spawn(move || -> redlease::Result<()> {
                let election = manager.leader_election("example:scheduler");
                let leading = election.candidate(host).lock()?; // campaign until leading
                for round in 0..3 {
                    leading.check()?; // still the leader? (a paused process finds out here)
                    println!("{host} (term {}): scheduling round {round}", leading.term());
                    std::thread::sleep(Duration::from_millis(50));
                }
                leading.unlock() // or drop it; the next candidate is woken
            }))
        })
        .collect::<redlease::Result<_>>()?;

    for _ in 0..6 {
        match observer.next_change_for(Duration::from_secs(10))? {
            Some(LeaderChange::Elected(leader)) => {
                println!("observer: {} leads (term {})", leader.value, leader.term)
            }
            Some(LeaderChange::Resigned(leader)) => println!("observer: {} resigned", leader.value),
            Some(other) => println!("observer: {other:?}"),
            None => return Err("no change within 10 s".into()),
        }
    }
    for instance in instances {
        instance.join().expect("an instance panicked")?;
    }
    assert_eq!(
        observing.leader_election("example:scheduler").leader()?,
        None
    );
    Ok(())
}
