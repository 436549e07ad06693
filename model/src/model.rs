//! The checked model: the initial states, the steps each state allows, what a step does
//! (the server's run of a script is here, with what the checker records of it), and the
//! properties (`crate::properties`), for `stateright` to search.

use stateright::{Model, Property};

use crate::clients::{
    Client, Scenario, LATCH, LATCH_CHANNEL, LATCH_COUNT, SEMAPHORE, SEMAPHORE_SIZE,
};
use crate::keyspace::{Keyspace, Reply};
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
            Scenario::Semaphore => Some((SEMAPHORE, SEMAPHORE_SIZE)),
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
        self.network.retain(|message| match message.body {
            Body::Answer(_) => clients[message.client as usize].awaits(message.seq),
            Body::Call(_) => true,
        });
    }

    /// A message arrives: a call runs on the server and its answer goes back; an answer
    /// reaches its client.
    fn deliver(&mut self, message: Message) {
        let Message { client, seq, body } = message;
        match body {
            Body::Answer(reply) => self.receive(client, seq, reply),
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
        let request = REQUESTS.contains(&call.script);
        let kept = request && self.server.get(&request_key_of(call)).is_some();
        let reply = eval(&mut self.server, call);
        if request && !kept && reply.error_code() != Some("REDLEASE_LATE") {
            self.ghost.note_applied(&request_key_of(call));
        }
        if call.script == "plain::ACQUIRE"
            && self.config.scenario == Scenario::Election
            && self.config.old.announce_in_acquisition
        {
            self.announce_with_the_acquisition(call, &reply);
        }
        self.record_publications(call);
        reply
    }

    /// The old election: the acquisition that wins a campaign announces it, in the same
    /// step, before the candidate hears of it.
    fn announce_with_the_acquisition(&mut self, call: &Call, reply: &Reply) {
        let Some((1, token)) = reply.as_pair() else {
            return;
        };
        let names = Scenario::Election.names();
        let holder = String::from_utf8_lossy(&call.args[1]).into_owned();
        let announce = Call::new(
            "election::ANNOUNCE",
            &[names.lock, names.record, names.log, names.election_channel],
        )
        .arg(&holder)
        .arg("value")
        .arg(token)
        .arg(1000);
        eval(&mut self.server, &announce);
        self.record_publications(&announce);
    }

    /// What the call published: a leader announced, the latch opened.
    fn record_publications(&mut self, call: &Call) {
        let names = Scenario::Election.names();
        for (channel, message) in std::mem::take(&mut self.server.published) {
            if channel == names.election_channel.as_bytes() && call.script == "election::ANNOUNCE" {
                let holder = String::from_utf8_lossy(&call.args[0]).into_owned();
                let term = String::from_utf8_lossy(&message).parse().unwrap_or(0);
                self.ghost.announced.push((holder, term));
                self.ghost.announced.sort();
            }
            if channel == LATCH_CHANNEL.as_bytes() && message == b"0" {
                self.ghost.latch_opened = true;
            }
        }
    }
}

/// The scripts the model sends that run once per request (their last key is the request's).
const REQUESTS: [&str; 3] = ["latch::COUNT_DOWN", "semaphore::TAKE", "semaphore::ADD"];

fn request_key_of(call: &Call) -> String {
    call.keys.last().cloned().unwrap_or_default()
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
