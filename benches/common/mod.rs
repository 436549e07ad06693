//! What the benches share: timed runs of a step, samples with their percentiles, and the
//! floors ([`floor`]): the crate's own scripts sent by hand. Each bench uses some of them.
#![allow(dead_code)]

pub mod floor;

use std::time::{Duration, Instant};

/// The number after `name` among the program's arguments (`--threads 500`), if any.
pub fn number_arg(name: &str) -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1))
        .and_then(|value| value.parse().ok())
}

/// `count` runs of `step`, timed each, after 1000 untimed ones.
pub fn measure_steps(
    count: usize,
    mut step: impl FnMut() -> redlease::Result<()>,
) -> redlease::Result<Vec<Duration>> {
    for _ in 0..1_000 {
        step()?;
    }
    (0..count)
        .map(|_| {
            let started = Instant::now();
            step()?;
            Ok(started.elapsed())
        })
        .collect()
}

pub struct Samples {
    sorted: Vec<Duration>,
}

impl Samples {
    pub fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Samples { sorted: samples }
    }

    pub fn percentile(&self, percent: usize) -> Duration {
        let index = (self.sorted.len() * percent / 100).min(self.sorted.len().saturating_sub(1));
        self.sorted.get(index).copied().unwrap_or_default()
    }

    pub fn describe(&self, round_trip: Option<&Samples>) -> String {
        let (p50, p99) = (self.percentile(50), self.percentile(99));
        let micros = |d: Duration| d.as_secs_f64() * 1e6;
        let mut text = format!(
            "n={:<6} p50 {:>8.1} µs  p99 {:>8.1} µs",
            self.sorted.len(),
            micros(p50),
            micros(p99)
        );
        if let Some(round_trip) = round_trip {
            let base = micros(round_trip.percentile(50));
            text.push_str(&format!(
                "   = {:.2} / {:.2} round trips (p50 / p99 over the p50 round trip)",
                micros(p50) / base,
                micros(p99) / base
            ));
        }
        text
    }
}
