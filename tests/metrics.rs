//! The `metrics` feature: with a recorder installed, the figures of `stats()` move as the
//! work happens, under the documented names and labels: an acquisition and its wait, the
//! renewals of a held lock, a hold raised at risk and cleared, a loss by its reason.
//!
//! Its own test binary: the recorder is global to the process.
//! `cargo test --features metrics --test metrics`.
#![cfg(feature = "metrics")]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{eventually, server};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redlease::LockManager;

const PATIENCE: Duration = Duration::from_secs(10);

/// What the recorder took in so far, by name and labels (`name{label=value,...}`): counters
/// summed, every histogram value. (The recorder hands each
/// figure out once: a snapshot resets it.)
#[derive(Default)]
struct Figures {
    counters: HashMap<String, u64>,
    histograms: HashMap<String, Vec<f64>>,
}

impl Figures {
    /// Takes in what was recorded since the last call.
    fn update(&mut self, snapshotter: &Snapshotter) -> &Self {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            let name = match labels.is_empty() {
                true => key.name().to_owned(),
                false => format!("{}{{{}}}", key.name(), labels.join(",")),
            };
            match value {
                DebugValue::Counter(count) => *self.counters.entry(name).or_default() += count,
                DebugValue::Gauge(value) => panic!("no gauge is reported: {name} {value}"),
                DebugValue::Histogram(values) => self
                    .histograms
                    .entry(name)
                    .or_default()
                    .extend(values.into_iter().map(|value| value.0)),
            }
        }
        self
    }

    fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }
}

#[test]
fn the_figures_of_stats_move_through_the_metrics_facade() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");

    let redis = server();
    let watchdog = Duration::from_secs(3);
    let manager = LockManager::builder(redis.url())
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
        .watchdog_timeout(watchdog)
        .build()
        .unwrap();
    // An acquisition, and a wait that ends with one.
    let guard = manager.lock("metered").lock().unwrap();
    let held = manager.lock("metered-wait").lock().unwrap();
    let (tell, told) = crossbeam_channel::bounded(0);
    let other = manager.clone();
    let waiter = std::thread::spawn(move || {
        tell.send(()).unwrap();
        other.lock("metered-wait").lock().unwrap().unlock().unwrap();
    });
    told.recv().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    held.unlock().unwrap();
    waiter.join().unwrap();
    let mut figures = Figures::default();
    let now = figures.update(&snapshotter);
    assert_eq!(now.counter("redlease_acquisitions_total"), 3);
    let waits = &now.histograms["redlease_wait_seconds"];
    assert_eq!(waits.len(), 3, "one wait time per acquisition: {waits:?}");
    let holds = &now.histograms["redlease_hold_seconds"];
    assert_eq!(holds.len(), 2, "one hold time per hold ended: {holds:?}");

    // Renewals of the held lock, and their round trips.
    assert!(eventually(PATIENCE, || {
        figures
            .update(&snapshotter)
            .counter("redlease_renewals_total")
            >= 1
    }));
    assert!(eventually(PATIENCE, || {
        let now = figures.update(&snapshotter);
        now.histograms
            .get("redlease_renewal_seconds")
            .is_some_and(|took| !took.is_empty())
    }));

    // Redis paused: the hold is at risk, then renewed again once it answers.
    redis.pause().unwrap();
    assert!(eventually(PATIENCE, || {
        let now = figures.update(&snapshotter);
        now.counter("redlease_at_risk_total{reason=unanswered}")
            + now.counter("redlease_at_risk_total{reason=unreachable}")
            >= 1
    }));
    assert!(figures.counter("redlease_renewal_failures_total") >= 1);
    redis.resume().unwrap();
    assert!(eventually(PATIENCE, || {
        figures
            .update(&snapshotter)
            .counter("redlease_risk_cleared_total")
            >= 1
    }));

    // A loss, by its reason.
    assert!(manager.lock("metered").break_lock().unwrap());
    assert!(eventually(PATIENCE, || {
        let now = figures.update(&snapshotter);
        now.counter("redlease_lost_total{reason=force_released}") == 1
    }));
    assert!(guard.is_lost());
}
