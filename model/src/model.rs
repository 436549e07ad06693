//! The checked model: the initial states, the steps each state allows, what a step does
//! (the server's run of a script is here, with what the checker records of it), and the
//! properties (`crate::properties`), for `stateright` to search.

use stateright::{Model, Property};

use crate::clients::{
    announce_call, Client, Scenario, Step, DATA, LATCH, LATCH_CHANNEL, LATCH_COUNT, SEMAPHORE,
    SEMAPHORE_SIZE,
};
use crate::keyspace::{Keyspace, Reply, Value};
use crate::world::{Action, Body, Call, Config, Ghost, Message, World, START_MS, TICK_MS};
use crate::{lua, properties, scripts};

/// The protocol under one set-up.
#[derive(Clone, Debug)]
pub struct ProtocolModel {
    pub config: Config,
}

impl Model for ProtocolModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let config = self.config;
        let mut server = Keyspace::at(START_MS);
        let count = match config.scenario {
            Scenario::Latch => Some((LATCH, LATCH_COUNT)),
            Scenario::Semaphore | Scenario::Permits => Some((SEMAPHORE, SEMAPHORE_SIZE)),
            _ => None,
        };
        if let Some((key, count)) = count {
            server.call(&[b"set".to_vec(), key.into(), count.to_string().into()]);
        }
        vec![World {
            config,
            server,
            clients: (0..config.clients).map(Client::new).collect(),
            network: Vec::new(),
            drops_left: config.faults.drops,
            duplicates_left: config.faults.duplicates,
            ticks_left: config.faults.ticks,
            ghost: Ghost::default(),
        }]
    }

    fn actions(&self, world: &World, actions: &mut Vec<Self::Action>) {
        for index in 0..world.network.len() {
            if index > 0 && world.network[index] == world.network[index - 1] {
                continue;
            }
            actions.push(Action::Deliver(index));
            if world.drops_left > 0 {
                actions.push(Action::Drop(index));
            }
            if world.duplicates_left > 0 && matches!(world.network[index].body, Body::Call(_)) {
                actions.push(Action::Duplicate(index));
            }
        }
        if world.ticks_left > 0 {
            actions.push(Action::Tick);
        }
        let mut choices = Vec::new();
        for client in &world.clients {
            choices.clear();
            client.choices(world.now(), self.config.scenario, &mut choices);
            for choice in &choices {
                actions.push(Action::Act(client.id, *choice));
            }
        }
    }

    fn next_state(&self, world: &World, action: Action) -> Option<World> {
        let mut next = world.clone();
        match action {
            Action::Deliver(index) => {
                let message = next.network.remove(index);
                next.deliver(message);
            }
            Action::Drop(index) => {
                next.network.remove(index);
                next.drops_left -= 1;
            }
            Action::Duplicate(index) => {
                let copy = next.network[index].clone();
                next.send(copy);
                next.duplicates_left -= 1;
            }
            Action::Tick => {
                let now = next.now() + TICK_MS;
                next.server.advance_to(now);
                next.ticks_left -= 1;
            }
            Action::Act(client, choice) => next.act(client, choice),
        }
        next.forget_unawaited_answers();
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all(self.config.scenario)
    }
}

impl World {
    /// Takes the answers no client waits for off the network: delivered, they would change
    /// nothing (a client never waits again for a call it stopped waiting for), and left,
    /// they would multiply the states by the orders of their no-op deliveries.
    fn forget_unawaited_answers(&mut self) {
        let clients = &self.clients;
        self.network.retain(|message| match &message.body {
            Body::Answer(_) => clients[message.client as usize].awaits(message.seq),
            Body::Grant { holder, .. } => clients[message.client as usize].hears(holder),
            Body::Call(_) => true,
        });
    }

    /// A message arrives: a call runs on the server and its answer goes back; an answer
    /// reaches its client.
    fn deliver(&mut self, message: Message) {
        let Message { client, seq, body } = message;
        match body {
            Body::Answer(reply) => self.receive(client, seq, reply),
            Body::Grant { holder, token } => self.hear_grant(client, &holder, token),
            Body::Call(call) => {
                let reply = self.run(&call);
                self.send(Message {
                    client,
                    seq,
                    body: Body::Answer(reply),
                });
            }
        }
    }

    /// Runs `call` on the server, atomically, and records what it did for the properties.
    fn run(&mut self, call: &Call) -> Reply {
        // A request's body ran when no answer was kept for it and it changed the keyspace.
        let request = request_key_of(call);
        let before = request
            .as_ref()
            .filter(|key| self.server.get(key).is_none())
            .map(|_| self.server.entries.clone());
        let first_in_line = self.first_in_line();
        let arg = |index: usize| String::from_utf8_lossy(&call.args[index]).into_owned();
        let held_before = call.script.ends_with("ACQUIRE") && self.holds(&arg(1));
        let upgrading_before = self.upgrading();
        let data_before = self.server.get(DATA).cloned();
        let reply = eval(&mut self.server, call);
        if self.server.get(DATA) != data_before.as_ref() {
            self.landed(&arg(3));
        }
        if let (Some(key), Some(before)) = (request, before) {
            if before != self.server.entries && reply.error_code().is_none() {
                self.ghost.note_applied(&key);
            }
        }
        match (call.script, reply.as_pair()) {
            (
                "plain::ACQUIRE"
                | "fair::ACQUIRE"
                | "rwlock::READ_ACQUIRE"
                | "rwlock::UPGRADABLE_ACQUIRE"
                | "rwlock::WRITE_ACQUIRE",
                Some((1, token)),
            ) => {
                let first = first_in_line.as_deref();
                // An upgrade's grant is new when its try took it (the field 'upgrading' names
                // the try that holds it), whether or not the chain's field was there.
                let new = match is_an_upgrade(call) {
                    true => self.upgrading() != upgrading_before,
                    false => !held_before,
                };
                self.granted_to(&arg(1), token as u64, new, first)
            }
            // An upgrade's try's undo (it names the try) leaves the chain to try again.
            ("plain::UNDO" | "fair::UNDO" | "rwlock::UNDO", pair)
                if !matches!(pair, Some((-1, _))) && !undoes_an_upgrade(call) =>
            {
                self.ghost.left.push(arg(0));
            }
            _ => {}
        }
        if call.script == "plain::ACQUIRE"
            && self.config.scenario == Scenario::Election
            && self.config.old.announce_in_acquisition
        {
            self.announce_with_the_acquisition(call, &reply);
        }
        self.record_publications(call, first_in_line.as_deref());
        reply
    }

    /// The server granted the lock to the chain `holder` with `token`: a `new` hold, or the
    /// one it had (a copy of its try, a try after a release granted it the lock); `first`
    /// was the first in a fair lock's line whose place lived before the grant.
    fn granted_to(&mut self, holder: &str, token: u64, new: bool, first: Option<&str>) {
        self.ghost.note_grant(holder, token, new);
        self.ghost.granted_after_leaving |= self.ghost.left.iter().any(|left| left == holder);
        self.ghost.out_of_order |= new && first.is_some_and(|first| first != holder);
    }

    /// A guarded write of the chain `holder` landed (the data changed): no other client may
    /// hold the lock by its clock now.
    fn landed(&mut self, holder: &str) {
        let now = self.now();
        let others = self
            .clients
            .iter()
            .any(|client| client.holder() != holder && client.holds_at(now));
        self.ghost.write_beside_a_holder |= others;
        self.ghost.writes_landed = self.ghost.writes_landed.saturating_add(1);
    }

    /// Whether the server holds the lock (of any scenario) for the chain `holder` (a field of
    /// the lock's hash) now.
    pub(crate) fn holds(&self, holder: &str) -> bool {
        let lock = self.config.scenario.names().lock;
        matches!(
            self.server.get(lock).map(|entry| &entry.value),
            Some(Value::Hash(hash)) if hash.contains_key(holder.as_bytes())
        )
    }

    /// The read-write lock's field `upgrading`: the upgrade try that holds the write lock.
    fn upgrading(&self) -> Option<Vec<u8>> {
        let lock = self.config.scenario.names().lock;
        match self.server.get(lock).map(|entry| &entry.value) {
            Some(Value::Hash(hash)) => hash.get(b"upgrading".as_slice()).cloned(),
            _ => None,
        }
    }

    /// The first waiter in the fair lock's queue whose place has not expired by the server's
    /// clock.
    fn first_in_line(&self) -> Option<String> {
        let names = Scenario::Fair.names();
        let Some(Value::List(queue)) = self.server.get(names.queue).map(|entry| &entry.value)
        else {
            return None;
        };
        let places = match self.server.get(names.places).map(|entry| &entry.value) {
            Some(Value::ZSet(places)) => places.clone(),
            _ => Default::default(),
        };
        let now = self.now() as f64;
        queue
            .iter()
            .find(|waiter| places.get(*waiter).is_some_and(|expiry| expiry.0 > now))
            .map(|waiter| String::from_utf8_lossy(waiter).into_owned())
    }

    /// The old election: the acquisition that wins a campaign announces it, in the same
    /// step, before the candidate hears of it.
    fn announce_with_the_acquisition(&mut self, call: &Call, reply: &Reply) {
        let Some((1, token)) = reply.as_pair() else {
            return;
        };
        let holder = String::from_utf8_lossy(&call.args[1]);
        let announce = announce_call(&holder, "value", token as u64);
        eval(&mut self.server, &announce);
        self.record_publications(&announce, None);
    }

    /// What the call published: a leader announced (a phantom unless the server holds the
    /// lock for it and granted it the term announced; in the old behaviour, also when its
    /// candidate, still waiting for its try's answer, then gives the try up), the latch
    /// opened, a fair lock granted by a release (`first` in its line before; the grant goes
    /// to its waiter).
    fn record_publications(&mut self, call: &Call, first: Option<&str>) {
        let names = Scenario::Election.names();
        for (channel, message) in std::mem::take(&mut self.server.published) {
            if let Some((holder, token)) = grant_of(&message) {
                self.granted_to(&holder, token, true, first);
                self.send_grant(holder, token);
            }
            if channel == names.election_channel.as_bytes() && call.script == "election::ANNOUNCE" {
                let holder = String::from_utf8_lossy(&call.args[0]).into_owned();
                let term = String::from_utf8_lossy(&message).parse().unwrap_or(0);
                if self.trying(&holder) {
                    self.ghost.announced_trying.push(holder.clone());
                }
                self.ghost.phantom |= !self.granted(&holder, term);
                self.ghost.announced = self.ghost.announced.saturating_add(1);
            }
            if channel == LATCH_CHANNEL.as_bytes() && message == b"0" {
                self.ghost.latch_opened = true;
            }
        }
    }

    /// Whether the chain `holder`'s try is still out.
    fn trying(&self, holder: &str) -> bool {
        self.clients
            .iter()
            .any(|client| client.holder() == holder && matches!(client.step, Step::Trying(_)))
    }

    /// Whether the server holds the lock for the chain `holder` now, and granted it `term`.
    fn granted(&self, holder: &str, term: u64) -> bool {
        self.holds(holder) && self.ghost.tokens.contains(&(holder.to_owned(), term))
    }
}

/// Whether `call` is an upgrade's try (the write lock's, with a try id).
fn is_an_upgrade(call: &Call) -> bool {
    call.script == "rwlock::WRITE_ACQUIRE" && call.args.get(5).is_some_and(|id| !id.is_empty())
}

/// Whether `call` is the undo of an upgrade's try (which names the try).
fn undoes_an_upgrade(call: &Call) -> bool {
    call.script == "rwlock::UNDO" && call.args.get(4).is_some_and(|id| !id.is_empty())
}

/// A fair lock's grant, from its message `grant <token> <lease ms> <holder id>`: the chain
/// it goes to, and the fencing token.
fn grant_of(message: &[u8]) -> Option<(String, u64)> {
    let message = String::from_utf8_lossy(message);
    let mut words = message.split(' ');
    if words.next()? != "grant" {
        return None;
    }
    let token = words.next()?.parse().ok()?;
    let holder = words.nth(1)?.to_owned();
    Some((holder, token))
}

impl World {
    /// Puts the grant to the chain `holder` in flight to the client that hears its channel.
    fn send_grant(&mut self, holder: String, token: u64) {
        let Some(client) = self.clients.iter().find(|client| client.hears(&holder)) else {
            return;
        };
        let client = client.id;
        self.send(Message {
            client,
            seq: 0,
            body: Body::Grant { holder, token },
        });
    }
}

/// The key a call keeps its answer under when it runs once per request: a count-down's, a
/// permit's or a guarded write's request key (its last key), a release's or resignation's
/// receipt (its third; a fair lock's release's, its fourth).
fn request_key_of(call: &Call) -> Option<String> {
    match call.script {
        "latch::COUNT_DOWN"
        | "semaphore::TAKE"
        | "semaphore::ADD"
        | "semaphore::PERMIT_TAKE"
        | "semaphore::PERMIT_RELEASE" => call.keys.last().cloned(),
        "plain::RELEASE" | "election::RESIGN" => call.keys.get(2).cloned(),
        "fair::RELEASE" => call.keys.get(3).cloned(),
        "guarded::GUARDED_WRITE" => call.keys.last().cloned(),
        "rwlock::READ_RELEASE" | "rwlock::WRITE_RELEASE" => call.keys.get(2).cloned(),
        _ => None,
    }
}

/// Runs `call`'s script (the crate's own source) on `server`.
fn eval(server: &mut Keyspace, call: &Call) -> Reply {
    let keys: Vec<Vec<u8>> = call
        .keys
        .iter()
        .map(|key| key.clone().into_bytes())
        .collect();
    lua::eval(server, scripts::source(call.script), &keys, &call.args)
}
