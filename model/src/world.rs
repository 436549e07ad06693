//! The checked system: one server running the crate's scripts on its keyspace, clients that
//! make the crate's calls, and the network between them, which delivers the messages in any
//! order, drops and duplicates them, and the server's clock, which moves on. A state of
//! [`World`] is everything at one moment; an [`Action`] is one step any of them may take.
//! What the clients decide lives in `crate::clients`, what is checked in `crate::properties`.

use crate::clients::{Choice, Client, Scenario};
use crate::keyspace::{Bytes, Keyspace, Reply};

/// The server's clock at the start, in ms since the epoch.
pub const START_MS: u64 = 1_700_000_000_000;
/// How far one step of the clock moves it, in ms.
pub const TICK_MS: u64 = 1000;

/// What the behaviour switched back to an older one's does, to show what the model finds in
/// it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Old {
    /// Requests carry no deadline (as before `REDLEASE_LATE`): a copy held up past its
    /// kept answer runs again.
    pub no_request_deadlines: bool,
    /// A campaign is announced by the acquisition that wins it (as before `announce.lua`),
    /// before its candidate knows it won.
    pub announce_in_acquisition: bool,
}

/// How much may go wrong, and how far the clock may move, in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Faults {
    /// Messages the network may lose (a lost answer is a broken connection).
    pub drops: u8,
    /// Messages the network may deliver twice.
    pub duplicates: u8,
    /// Steps of the server's clock.
    pub ticks: u8,
}

/// One run's set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    pub scenario: Scenario,
    pub clients: u8,
    pub faults: Faults,
    pub old: Old,
}

/// One call of a script, as it travels: the script's name in the crate, keys, arguments.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Call {
    pub script: &'static str,
    pub keys: Vec<String>,
    pub args: Vec<Bytes>,
}

impl Call {
    pub fn new(script: &'static str, keys: &[&str]) -> Self {
        Call {
            script,
            keys: keys.iter().map(|key| (*key).to_owned()).collect(),
            args: Vec::new(),
        }
    }

    pub fn arg(mut self, arg: impl ToString) -> Self {
        self.args.push(arg.to_string().into_bytes());
        self
    }
}

/// What a message carries.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Body {
    /// A call, to the server.
    Call(Call),
    /// The server's answer to a call, to its client.
    Answer(Reply),
    /// A fair lock's grant to the chain `holder` (its fencing token), published on the
    /// chain's channel, to the client that subscribed to it.
    Grant { holder: String, token: u64 },
}

/// A message in flight between the server and client `client`; `seq` is the number of the
/// client's call it is (or answers).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Message {
    pub client: u8,
    pub seq: u16,
    pub body: Body,
}

/// What the checker records beside the system, for the properties: what happened, not what
/// any part of the system knows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// How many times each request's body ran, by the request's key.
    pub applied: Vec<(String, u8)>,
    /// The fencing token each chain was granted, by the server's answers, and whether a new
    /// chain's token ever failed to rise above every earlier one.
    pub tokens: Vec<(String, u64)>,
    pub token_fell: bool,
    /// A leader was announced whose candidate did not hold its guard with that term then.
    pub phantom: bool,
    /// Leaders announced so far.
    pub announced: u8,
    /// Chains announced while their try was still out (the old behaviour): a phantom if
    /// their candidate then gives the try up.
    pub announced_trying: Vec<String>,
    /// The latch opened (its count-down to zero announced it).
    pub latch_opened: bool,
    /// The chains whose undo ran for good (no copy of their tries could come any more): they
    /// left, and whether one was granted the lock after.
    pub left: Vec<String>,
    pub granted_after_leaving: bool,
    /// Whether a fair lock was ever granted to a waiter other than the first in line whose
    /// place lives.
    pub out_of_order: bool,
    /// A fair-lock waiter held the lock by a grant it heard.
    pub held_by_grant: bool,
    /// Guarded writes that landed, and whether one landed while another client held the
    /// lock by its clock.
    pub writes_landed: u8,
    pub write_beside_a_holder: bool,
}

impl Ghost {
    pub fn note_applied(&mut self, request: &str) {
        match self.applied.iter_mut().find(|(key, _)| key == request) {
            Some((_, count)) => *count += 1,
            None => {
                self.applied.push((request.to_owned(), 1));
                self.applied.sort();
            }
        }
    }

    /// The server granted `token` to the chain `holder`: a repeat of the grant its hold
    /// stands on (a copy of its try, a try after a release granted it the lock) answers the
    /// same token; a `new` hold's (a new chain's, one taken again after its undo freed it, or
    /// the write lock an upgrade's try took, over an earlier try's grant or not)
    /// rises above every earlier one.
    pub fn note_grant(&mut self, holder: &str, token: u64, new: bool) {
        let at = self.tokens.iter().position(|(chain, _)| chain == holder);
        match (at, new) {
            (Some(at), false) => self.token_fell |= self.tokens[at].1 != token,
            (None, false) => self.token_fell = true,
            (at, true) => {
                self.token_fell |= self.tokens.iter().any(|(_, earlier)| *earlier >= token);
                match at {
                    Some(at) => self.tokens[at].1 = token,
                    None => {
                        self.tokens.push((holder.to_owned(), token));
                        self.tokens.sort();
                    }
                }
            }
        }
    }
}

/// Everything at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    pub config: Config,
    pub server: Keyspace,
    pub clients: Vec<Client>,
    /// In flight, sorted: the network keeps no order.
    pub network: Vec<Message>,
    pub drops_left: u8,
    pub duplicates_left: u8,
    pub ticks_left: u8,
    pub ghost: Ghost,
}

impl World {
    pub fn now(&self) -> u64 {
        self.server.now_ms
    }

    /// Puts `message` in flight.
    pub fn send(&mut self, message: Message) {
        let at = self.network.partition_point(|each| each < &message);
        self.network.insert(at, message);
    }
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The network delivers the message at this index: a call runs on the server, an answer
    /// reaches its client.
    Deliver(usize),
    /// The network loses it.
    Drop(usize),
    /// The network delivers a copy of it later too.
    Duplicate(usize),
    /// The server's clock moves on a step; keys expire.
    Tick,
    /// A client does something on its own: starts, renews, releases, stops waiting for an
    /// answer (its response timeout), sends an undo again.
    Act(u8, Choice),
}

impl World {
    /// The state in a few lines: the clock, the keys, each client's step, what is in flight.
    pub fn summary(&self) -> String {
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let mut out = format!("now +{} ms\n", self.now() - START_MS);
        for (key, entry) in &self.server.entries {
            let ttl = entry.expires_at.map(|at| at as i64 - self.now() as i64);
            out += &format!("  key {key} = {:?} ttl {ttl:?}\n", entry.value);
        }
        for client in &self.clients {
            out += &format!(
                "  client {}: {:?} undos {:?}\n",
                client.id, client.step, client.undos
            );
        }
        for message in &self.network {
            let body = match &message.body {
                Body::Call(call) => {
                    let args: Vec<String> = call.args.iter().map(|arg| text(arg)).collect();
                    format!("{} {:?} {args:?}", call.script, call.keys)
                }
                Body::Answer(reply) => format!("answer {reply:?}"),
                Body::Grant { holder, token } => format!("grant to {holder}, token {token}"),
            };
            out += &format!(
                "  in flight, client {} call {}: {body}\n",
                message.client, message.seq
            );
        }
        out
    }
}
