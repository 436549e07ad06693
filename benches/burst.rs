//! A burst of waiters: 2 000 threads of one process start `lock()` on 2 000 names held by
//! another manager, then every name is released at once. Reports how many command
//! connections the waiting manager opened in all and at once (`INFO` on a throwaway
//! server, sampled every 2 ms), against its bound, and the wake latency from each release to
//! its acquisition (p50, p99).
//!
//! `cargo bench --bench burst`; `-- --threads 500` for fewer; `-- --max-connections 16` for
//! another bound than the default, `-- --max-idle 8` for another number of idle ones kept.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use redlease::LockManager;
use redlease_testing::RedisServer;

mod common;

use common::{number_arg, Samples};

/// A figure of `INFO` on `server`.
fn info(server: &RedisServer, section: &str, field: &str) -> usize {
    server
        .command(&["INFO", section])
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let threads = number_arg("--threads").unwrap_or(2_000);
    let server = RedisServer::start_with_args(&["--maxclients", "10000"])?;
    let holder = LockManager::builder(server.url()).build()?;
    let mut builder = LockManager::builder(server.url());
    if let Some(bound) = number_arg("--max-connections") {
        builder = builder.max_connections(bound);
    }
    if let Some(idle) = number_arg("--max-idle") {
        builder = builder.max_idle_connections(idle);
    }
    let waiter = builder.build()?;
    let names: Vec<String> = (0..threads).map(|index| format!("burst:{index}")).collect();
    let held: Vec<_> = names
        .iter()
        .map(|name| holder.lock(name).lock())
        .collect::<redlease::Result<_>>()?;
    let connections_before = info(&server, "stats", "total_connections_received");
    let clients_before = info(&server, "clients", "connected_clients");

    let started = Barrier::new(threads + 1);
    let released_at: Mutex<Vec<Option<Instant>>> = Mutex::new(vec![None; threads]);
    let latencies = Mutex::new(Vec::with_capacity(threads));
    let sampling = AtomicBool::new(true);
    let most_clients = AtomicUsize::new(0);
    // The sampler's own connections (one a sample), not counted.
    let samples = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while sampling.load(Ordering::SeqCst) {
                let clients = info(&server, "clients", "connected_clients");
                samples.fetch_add(1, Ordering::SeqCst);
                // (Less the sampler's own connection.)
                most_clients.fetch_max(clients.saturating_sub(1), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let workers: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(index, name)| {
                let (waiter, started, released_at, latencies) =
                    (&waiter, &started, &released_at, &latencies);
                std::thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn_scoped(scope, move || {
                        let lock = waiter.lock(name);
                        started.wait();
                        let guard = lock.lock().expect("taken");
                        let taken_at = Instant::now();
                        let released = released_at.lock().unwrap()[index];
                        if let Some(released) = released {
                            latencies
                                .lock()
                                .unwrap()
                                .push(taken_at.saturating_duration_since(released));
                        }
                        drop(guard);
                    })
                    .expect("spawn a waiter")
            })
            .collect();
        started.wait();
        // Every waiter has made its first try and sleeps on its release channel.
        while waiter.stats().waiting < threads {
            std::thread::sleep(Duration::from_millis(10));
        }
        for (index, guard) in held.into_iter().enumerate() {
            released_at.lock().unwrap()[index] = Some(Instant::now());
            guard.unlock().expect("released");
        }
        for worker in workers {
            worker.join().expect("a waiter");
        }
        sampling.store(false, Ordering::SeqCst);
    });
    let opened = info(&server, "stats", "total_connections_received")
        - connections_before
        - samples.load(Ordering::SeqCst)
        - 1; // this reading's
    let most = most_clients
        .load(Ordering::SeqCst)
        .saturating_sub(clients_before);
    let latencies = Samples::new(latencies.into_inner().unwrap());
    println!(
        "{threads} waiters (bound {}): {opened} connections opened, at most {most} open at once \
         beyond those before; wake latency from release to acquisition: {}",
        number_arg("--max-connections").map_or("default".to_owned(), |bound| bound.to_string()),
        latencies.describe(None)
    );
    Ok(())
}
