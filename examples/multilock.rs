//! A multi-lock: two locks taken all or nothing. While another thread holds one of them,
//! the multi-lock takes neither; once it is free, it takes both at once.
//!
//! `cargo run --example multilock [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::Duration;

use redlease::{LockManager, MultiLock};
use redlease_testing::url_or_throwaway;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let manager = LockManager::builder(url.as_str()).build()?;
    let transfer = MultiLock::new([
        manager.lock("example:account-17"),
        manager.lock("example:account-42"),
    ])?;

    let (took_one, held) = crossbeam_channel::bounded::<()>(0);
    let (release, let_go) = crossbeam_channel::bounded::<()>(0);
    let other = manager.lock("example:account-42");
    let holder = std::thread::spawn(move || -> redlease::Result<()> {
        let guard = other.lock()?;
        let _ = took_one.send(());
        let _ = let_go.recv();
        guard.unlock()
    });
    held.recv()?;
    let refused = transfer.try_lock_for(Duration::from_millis(200))?;
    println!(
        "with account-42 held elsewhere: took the pair = {}, account-17 locked = {}",
        refused.is_some(),
        manager.lock("example:account-17").is_locked()?
    );
    drop(release);
    holder.join().expect("the holder panicked")?;
    let guard = transfer.lock()?;
    println!(
        "once it was free: holding {} of 2, fencing token {}",
        guard.held_members(),
        guard.fencing_token()
    );
    guard.unlock()?;
    Ok(())
}
