//! The model checked: every scenario keeps its properties in every state within its budget,
//! with the crate's behaviour; with an older behaviour switched back on, the search finds the
//! defect it had, as a path of steps.
//!
//! The budgets (the clients, the faults and the clock's steps of each scenario) are what CI
//! runs; `REDLEASE_MODEL_TICKS`, `REDLEASE_MODEL_DROPS` and `REDLEASE_MODEL_DUPLICATES`
//! raise them for a longer run by hand.

use std::time::Instant;

use redlease_model::{Config, Faults, Old, ProtocolModel, Scenario};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

/// What one search found.
struct Searched {
    states: usize,
    /// The properties a path was found for: a counterexample of an `always`, an example of a
    /// `sometimes`.
    discovered: Vec<&'static str>,
}

fn search(config: Config, stop_at_first_failure: bool) -> Searched {
    let started = Instant::now();
    let model = ProtocolModel { config };
    let failures: Vec<&str> = model
        .properties()
        .into_iter()
        .filter(|property| property.expectation != Expectation::Sometimes)
        .map(|property| property.name)
        .collect();
    let mut builder = model.checker().threads(2);
    if stop_at_first_failure {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let states = checker.unique_state_count();
    println!(
        "{:?} with {:?}, old behaviour {:?}: {states} states, depth {}, in {:.1?}",
        config.scenario,
        config.faults,
        config.old,
        checker.max_depth(),
        started.elapsed()
    );
    let mut discovered = Vec::new();
    for (name, path) in checker.discoveries() {
        if failures.contains(&name) {
            println!("broken, {name}: by the steps");
            for (state, action) in path.into_vec() {
                println!("{}-> {action:?}", state.summary());
            }
        }
        discovered.push(name);
    }
    Searched { states, discovered }
}

fn from_env(name: &str, default: u8) -> u8 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// At most `drops` messages lost, `duplicates` duplicated, `ticks` steps of the clock.
fn faults(drops: u8, duplicates: u8, ticks: u8) -> Faults {
    Faults {
        drops,
        duplicates,
        ticks,
    }
}

/// Two clients, with `faults` raised by the environment.
fn config(scenario: Scenario, faults: Faults, old: Old) -> Config {
    Config {
        scenario,
        clients: 2,
        faults: Faults {
            drops: from_env("REDLEASE_MODEL_DROPS", faults.drops),
            duplicates: from_env("REDLEASE_MODEL_DUPLICATES", faults.duplicates),
            ticks: from_env("REDLEASE_MODEL_TICKS", faults.ticks),
        },
        old,
    }
}

/// Searches `scenario` within `faults` with the crate's behaviour: no property broken,
/// every `sometimes` reached.
fn holds(scenario: Scenario, faults: Faults) {
    let config = config(scenario, faults, Old::default());
    let searched = search(config, false);
    let model = ProtocolModel { config };
    for property in model.properties() {
        let found = searched.discovered.contains(&property.name);
        match property.expectation {
            Expectation::Sometimes => {
                assert!(found, "{scenario:?}: no state where {}", property.name)
            }
            _ => assert!(!found, "{scenario:?}: broken: {}", property.name),
        }
    }
    assert!(
        searched.states > 10_000,
        "a search that explored next to nothing"
    );
}

#[test]
fn the_latch_keeps_its_promises_in_every_interleaving() {
    holds(Scenario::Latch, faults(1, 1, 5));
}

#[test]
fn the_lock_keeps_its_promises_in_every_interleaving() {
    // Four steps of the clock: past a lease (three), where a grant can come too late.
    holds(Scenario::Lock, faults(1, 0, 4));
}

#[test]
fn the_fair_lock_keeps_its_promises_in_every_interleaving() {
    holds(Scenario::Fair, faults(1, 0, 3));
}

#[test]
fn the_read_write_lock_keeps_its_promises_in_every_interleaving() {
    holds(Scenario::ReadWrite, faults(1, 0, 4));
}

#[test]
fn guarded_writes_keep_their_promises_in_every_interleaving() {
    // Three steps of the clock: past the writer's lease, when another may hold the lock and
    // a copy of the write may still come.
    holds(Scenario::Guarded, faults(0, 0, 3));
}

#[test]
fn the_upgradable_read_keeps_its_promises_in_every_interleaving() {
    // No faults, no clock: an upgrade's undo runs when it first arrives (its later sends are
    // what the clock would add), which is where a late copy of an earlier try once took the
    // grant from a later one, and a release that timed out, run after the next upgrade,
    // freed it.
    holds(Scenario::Upgradable, faults(0, 0, 0));
}

#[test]
fn the_election_keeps_its_promises_in_every_interleaving() {
    holds(Scenario::Election, faults(1, 0, 2));
}

#[test]
fn the_semaphore_keeps_its_promises_in_every_interleaving() {
    // Three steps of the clock: past a take's deadline (two) and to the end of its answer's
    // keeping, where its undo once gave the permit back twice.
    holds(Scenario::Semaphore, faults(1, 0, 3));
}

#[test]
fn the_permits_keep_their_promises_in_every_interleaving() {
    // Two steps of the clock: past a permit's lease, when it is given back by the next
    // script.
    holds(Scenario::Permits, faults(1, 0, 2));
}

/// Searches with an old behaviour on until the first broken property; answers the broken
/// ones.
fn broken_with(scenario: Scenario, faults: Faults, old: Old) -> Vec<&'static str> {
    let config = config(scenario, faults, old);
    let model = ProtocolModel { config };
    let searched = search(config, true);
    model
        .properties()
        .into_iter()
        .filter(|property| property.expectation != Expectation::Sometimes)
        .map(|property| property.name)
        .filter(|name| searched.discovered.contains(name))
        .collect()
}

#[test]
fn without_request_deadlines_a_late_copy_runs_twice() {
    let old = Old {
        no_request_deadlines: true,
        ..Old::default()
    };
    let broken = broken_with(Scenario::Latch, faults(0, 1, 5), old);
    assert!(
        broken.contains(&"no request runs twice") || broken.contains(&"the latch opens at zero"),
        "{broken:?}"
    );
}

#[test]
fn without_request_deadlines_a_late_release_runs_twice() {
    let old = Old {
        no_request_deadlines: true,
        ..Old::default()
    };
    let broken = broken_with(Scenario::Semaphore, faults(0, 1, 5), old);
    assert!(
        broken.contains(&"no request runs twice")
            || broken.contains(&"the semaphore stays within its size"),
        "{broken:?}"
    );
}

#[test]
fn an_acquisition_that_announces_makes_a_phantom_leader() {
    let old = Old {
        announce_in_acquisition: true,
        ..Old::default()
    };
    let broken = broken_with(Scenario::Election, faults(1, 0, 2), old);
    assert_eq!(broken, ["no phantom leader"]);
}
