//! A job that paces itself by what its lock guard tells: it starts a batch only while its
//! hold is not at risk and is certain for longer than a batch takes, and records its progress
//! with guarded writes, which Redis applies only while the hold is current.
//!
//! Halfway through, an operator frees the lock by force (as `redlease-inspect` or
//! `break_lock` would). The job's next guarded write is refused and nothing is written: the
//! status in Redis still names the last batch the holder did while it held the lock.
//!
//! `cargo run --example guarded_job [redis-url]`: without a URL it starts a throwaway
//! `redis-server` on a free local port.

use std::time::Duration;

use redlease::{Error, LockGuard, LockManager, Writes};
use redlease_testing::url_or_throwaway;

/// How long one batch takes at most: a batch starts only when this much is certain, and more.
const BATCH_TAKES: Duration = Duration::from_millis(200);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = url_or_throwaway(std::env::args().nth(1))?;
    let manager = LockManager::builder(url.as_str()).build()?;
    let operator = LockManager::builder(url.as_str()).build()?;

    let guard = manager.lock("export").lock()?;
    for batch in 1..=6 {
        if batch == 4 {
            operator.lock("export").break_lock()?;
            println!("operator: freed the lock by force");
        }
        match run_batch(&guard, batch) {
            Ok(()) => println!("batch {batch}: done and recorded"),
            Err(Error::LockLost { reason, .. }) => {
                println!("batch {batch}: not recorded, the lock is lost ({reason}); stopping");
                break;
            }
            Err(err) => return Err(err.into()),
        }
    }
    let mut redis = redis::Client::open(url.as_str())?.get_connection()?;
    let done: Option<String> = redis::cmd("HGET")
        .arg("{export}:status")
        .arg("batches_done")
        .query(&mut redis)?;
    println!("status in Redis: {done:?} batches done (written only while the lock was held)");
    Ok(())
}

/// Runs one batch and records it, if the hold allows.
fn run_batch(guard: &LockGuard, batch: u32) -> redlease::Result<()> {
    if guard.is_at_risk() {
        // Renewals are failing: do not start what may not be finished under the lock.
        guard.check()?;
        return Ok(());
    }
    guard.check_valid_for(BATCH_TAKES * 5)?;
    std::thread::sleep(BATCH_TAKES / 4); // the batch's work
    guard.guarded_write(
        Writes::new()
            .hash_set("{export}:status", "batches_done", batch.to_string())
            .set("{export}:holder", guard.holder_id()),
    )?;
    Ok(())
}
