//! A holder stalls past its lease; its late write is refused by fencing.
//!
//! The slow holder takes the lock with a 1 s lease and then stalls for 2 s before writing,
//! as a process does in a long GC pause, under swap, or when it is `SIGSTOP`ped (a paused
//! process renews nothing; here a fixed lease plays that part). Meanwhile the lease runs out
//! and a second holder takes the lock and writes. When the slow holder wakes up and writes,
//! the [`FencedStore`](redlease::FencedStore) refuses it: its fencing token is older than the
//! one the store has seen. The guard also knows it was lost, for code that checks.
//!
//! `cargo run --example fencing [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::Duration;

use redlease::{Error, LockManager};
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let manager = LockManager::builder(url.as_str()).build()?;
    let lock = manager.lock("invoice:42");
    let invoice = manager.fenced_store("invoice:42:state");

    let (took_it, slow_holder_took_it) = std::sync::mpsc::channel();
    let slow = std::thread::Builder::new()
        .name("slow-holder".into())
        .spawn({
            let lock = lock.clone();
            let invoice = invoice.clone();
            move || -> redlease::Result<()> {
                let guard = lock.leased_for(Duration::from_secs(1)).lock()?;
                let token = guard.fencing_token();
                println!("slow holder: took the lock, token {token}; stalling for 2 s");
                let _ = took_it.send(());
                std::thread::sleep(Duration::from_secs(2));
                println!(
                    "slow holder: awake; the guard says lost = {}",
                    guard.is_lost()
                );
                match invoice.set(token, "paid by the slow holder") {
                    Err(Error::StaleToken { highest, .. }) => println!(
                        "slow holder: write refused, token {token} < {highest} already seen"
                    ),
                    other => println!("slow holder: write answered {other:?}"),
                }
                match guard.unlock() {
                    Err(Error::NotHeld { .. }) => println!("slow holder: release: not held"),
                    other => println!("slow holder: release answered {other:?}"),
                }
                Ok(())
            }
        })?;

    // Let the slow holder go first, then wait for the lock like any other worker.
    slow_holder_took_it.recv()?;
    let guard = lock
        .try_lock_for(Duration::from_secs(10))?
        .expect("the slow holder's lease runs out after 1 s");
    println!(
        "next holder: took the lock when the lease ran out, token {}",
        guard.fencing_token()
    );
    invoice.set(guard.fencing_token(), "paid by the next holder")?;
    println!("next holder: wrote the invoice");
    drop(guard);

    slow.join().expect("the slow holder panicked")?;
    println!(
        "invoice: {:?} (highest token {})",
        invoice.get::<String>()?.unwrap_or_default(),
        invoice.highest_token()?
    );
    Ok(())
}
