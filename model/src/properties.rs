//! What is checked in every state the search reaches (`always`), and what some state must
//! show (`sometimes`: the model is not vacuous, each scenario gets where it should).

use stateright::Property;

use crate::clients::{Scenario, Step, LATCH_COUNT, PERMITS_OUT, SEMAPHORE, SEMAPHORE_SIZE};
use crate::keyspace::Value;
use crate::model::ProtocolModel;
use crate::world::World;

type Check = fn(&ProtocolModel, &World) -> bool;

/// The properties of `scenario`.
pub fn all(scenario: Scenario) -> Vec<Property<ProtocolModel>> {
    let mut all = vec![
        always("fencing tokens rise", tokens_rise),
        always("no request runs twice", no_request_runs_twice),
    ];
    if !matches!(
        scenario,
        Scenario::Latch | Scenario::Semaphore | Scenario::Permits
    ) {
        all.extend([
            always("one valid holder", one_valid_holder),
            always("a valid holder is the one Redis has", holders_on_record),
            always("no grant to a chain that left", no_grant_after_leaving),
            sometimes("a client holds the lock", someone_holds),
        ]);
    }
    all.extend(own(scenario));
    all
}

/// The properties only `scenario` has.
fn own(scenario: Scenario) -> Vec<Property<ProtocolModel>> {
    match scenario {
        Scenario::Lock | Scenario::ReadWrite => vec![],
        Scenario::Upgradable => vec![sometimes("the upgradable reader writes", upgraded)],
        Scenario::Guarded => vec![
            always(
                "a guarded write lands only while no other client holds the lock",
                writes_alone,
            ),
            sometimes("a guarded write lands", write_landed),
        ],
        Scenario::Fair => vec![
            always(
                "the first in line whose place lives is granted the lock",
                in_line,
            ),
            sometimes(
                "a waiter holds the lock by a release's grant",
                held_by_grant,
            ),
        ],
        Scenario::Election => vec![
            always("no phantom leader", no_phantom_leader),
            sometimes("a leader is announced", announced),
        ],
        Scenario::Latch => vec![
            always("the latch opens at zero", latch_opens_at_zero),
            sometimes("the latch opens", latch_opened),
        ],
        Scenario::Semaphore | Scenario::Permits => vec![
            always("the semaphore stays within its size", within_size),
            sometimes("a client holds a permit", holds_permit),
        ],
    }
}

fn always(name: &'static str, check: Check) -> Property<ProtocolModel> {
    Property::always(name, check)
}

fn sometimes(name: &'static str, check: Check) -> Property<ProtocolModel> {
    Property::sometimes(name, check)
}

/// At most one client holds the lock by its own clock, readers of a read-write lock aside
/// (they share it, with no writer; the upgradable reader writes alone).
fn one_valid_holder(model: &ProtocolModel, world: &World) -> bool {
    let scenario = model.config.scenario;
    let now = world.now();
    let writers = (world.clients.iter())
        .filter(|client| client.writes_at(now, scenario))
        .count();
    let holders = (world.clients.iter())
        .filter(|client| client.holds_at(now) || client.writes_at(now, scenario))
        .count();
    writers == 0 || (writers == 1 && holders == 1)
}

/// A client that holds the lock by its own clock is on record as its holder in Redis (by
/// its field of the lock's hash).
fn holders_on_record(model: &ProtocolModel, world: &World) -> bool {
    let scenario = model.config.scenario;
    let now = world.now();
    world.clients.iter().all(|client| {
        let upgraded = scenario == Scenario::Upgradable && client.writes_at(now, scenario);
        (!client.holds_at(now) || world.holds(&client.field(scenario)))
            && (!upgraded || world.holds(&format!("{}:write", client.holder())))
    })
}

fn upgraded(model: &ProtocolModel, world: &World) -> bool {
    let scenario = model.config.scenario;
    (world.clients.iter()).any(|client| client.writes_at(world.now(), scenario))
}

fn someone_holds(_: &ProtocolModel, world: &World) -> bool {
    let now = world.now();
    world.clients.iter().any(|client| client.holds_at(now))
}

/// No chain is granted the lock after its undo ran for good (no copy of its tries could
/// come any more): nobody would hold it, and the others would wait out its lease.
fn no_grant_after_leaving(_: &ProtocolModel, world: &World) -> bool {
    !world.ghost.granted_after_leaving
}

/// Every new chain a fair lock is granted to was the first in its line whose place lived
/// (or the line was empty).
fn in_line(_: &ProtocolModel, world: &World) -> bool {
    !world.ghost.out_of_order
}

fn writes_alone(_: &ProtocolModel, world: &World) -> bool {
    !world.ghost.write_beside_a_holder
}

fn write_landed(_: &ProtocolModel, world: &World) -> bool {
    world.ghost.writes_landed > 0
}

fn held_by_grant(_: &ProtocolModel, world: &World) -> bool {
    world.ghost.held_by_grant
}

fn tokens_rise(_: &ProtocolModel, world: &World) -> bool {
    !world.ghost.token_fell
}

fn no_request_runs_twice(_: &ProtocolModel, world: &World) -> bool {
    world.ghost.applied.iter().all(|(_, count)| *count <= 1)
}

/// The latch opens only once as many different count-downs as its count ran.
fn latch_opens_at_zero(_: &ProtocolModel, world: &World) -> bool {
    !world.ghost.latch_opened || world.ghost.applied.len() >= LATCH_COUNT as usize
}

/// Every leader announced held its guard, with the term announced, when it was announced.
fn no_phantom_leader(_: &ProtocolModel, world: &World) -> bool {
    !world.ghost.phantom
}

/// The permits available and those its clients hold (by their clocks) are never more than
/// the semaphore's size, nor are those available and those out on record: no give-back ran
/// twice, no take went unnoticed as one, no permit out was given back while its holder held
/// it.
fn within_size(_: &ProtocolModel, world: &World) -> bool {
    let available = match world.server.get(SEMAPHORE).map(|entry| &entry.value) {
        Some(Value::Str(count)) => String::from_utf8_lossy(count)
            .parse::<i64>()
            .unwrap_or(i64::MAX),
        _ => 0,
    };
    let out = match world.server.get(PERMITS_OUT).map(|entry| &entry.value) {
        Some(Value::ZSet(permits)) => permits.len() as i64,
        _ => 0,
    };
    let held = holding_permits(world).count() as i64;
    available + held.max(out) <= SEMAPHORE_SIZE as i64
}

/// The clients that hold a permit by their clocks.
fn holding_permits(world: &World) -> impl Iterator<Item = &crate::clients::Client> {
    let now = world.now();
    world.clients.iter().filter(move |client| {
        matches!(client.step, Step::HoldingPermit { valid_until } if now < valid_until)
    })
}

fn holds_permit(_: &ProtocolModel, world: &World) -> bool {
    holding_permits(world).next().is_some()
}

fn latch_opened(_: &ProtocolModel, world: &World) -> bool {
    world.ghost.latch_opened
}

fn announced(_: &ProtocolModel, world: &World) -> bool {
    world.ghost.announced > 0
}
