//! The clients: what the crate decides at each point of a call, reduced to the decisions
//! that change what reaches the server. A client takes a lock (a try with a deadline; on an
//! unknown outcome an undo that its cleanup sends until answered, and a new chain for the
//! next try), renews and releases it, writes under it (a guarded write, a request); waits in
//! a fair lock's queue (tries again with the
//! same chain, takes a grant a release sends on its channel, leaves the queue by an undo);
//! counts a latch down (a request sent again with the same id until its deadline); or
//! campaigns in an election (the lock's try, then the announcement once its guard exists,
//! then the resignation).

use crate::keyspace::Reply;
use crate::world::{Body, Call, Message, World};

/// The lease the clients ask for, in ms.
pub const LEASE_MS: u64 = 3000;
/// How long after its first send a call's copies may still be sent: its deadline, in ms.
pub const SEND_FOR_MS: u64 = 2000;
/// How long after its deadline a request's answer is kept, in ms.
pub const KEEP_AFTER_MS: u64 = 1000;
/// How many times a client sends one request at most (its first send included). A try is
/// sent once: the crate gives it up and undoes it when its answer does not come.
const MAX_SENDS: u8 = 2;
/// How many times the cleanup sends an undo at most.
const MAX_UNDO_SENDS: u8 = 2;
/// How many renewals a client sends in one hold at most.
const MAX_RENEWALS: u8 = 1;
/// A latch's count at the start.
pub const LATCH_COUNT: u8 = 2;
/// How long a fair-lock waiter's place is kept after the place ahead of it expires, in ms:
/// as long as a lease, so that a grant's lease (the shorter of the two) is the one asked for.
pub const PLACE_MS: u64 = LEASE_MS;
/// How many tries a fair-lock waiter makes in one wait at most.
const MAX_FAIR_TRIES: u8 = 2;
/// How many times the upgradable reader tries to upgrade at most.
const MAX_UPGRADE_TRIES: u8 = 2;

/// What the clients do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Each client takes the lock once, may renew it, and releases it.
    Lock,
    /// Each client counts the latch down once.
    Latch,
    /// Each client campaigns once, announces itself if it wins, and resigns.
    Election,
    /// Each client takes a permit of a semaphore of one, and gives it back.
    Semaphore,
    /// Each client waits for the fair lock in its queue, holds it, and releases it.
    Fair,
    /// The read-write lock: the even clients take its read lock, the odd ones its write
    /// lock, once each, and release it.
    ReadWrite,
    /// Each client takes a permit of a permit-expirable semaphore of one, with a lease, and
    /// gives it back.
    Permits,
    /// Each client takes the lock, makes a guarded write under it (a request, sent again
    /// with the same id until its deadline), and releases it.
    Guarded,
    /// The read-write lock's upgradable read: the even clients take it and upgrade it to
    /// the write lock (up to two tries, the second also after releasing what the first
    /// took), the odd ones take the read lock; each releases.
    Upgradable,
}

/// The keys of the lock (or the election's lock) the clients share.
pub struct Names {
    pub lock: &'static str,
    pub token: &'static str,
    pub channel: &'static str,
    pub record: &'static str,
    pub log: &'static str,
    pub election_channel: &'static str,
    /// A fair lock's queue, its places' expiries, the waiters that accept grants.
    pub queue: &'static str,
    pub places: &'static str,
    pub grants: &'static str,
}

impl Scenario {
    pub fn names(self) -> Names {
        match self {
            Scenario::Election => Names {
                lock: "leader",
                token: "{leader}:token",
                channel: "redisson_lock__channel:{leader}",
                record: "{leader}:record",
                log: "{leader}:log",
                election_channel: "{leader}:election",
                queue: "",
                places: "",
                grants: "",
            },
            Scenario::ReadWrite | Scenario::Upgradable => Names {
                lock: "rw",
                token: "{rw}:token",
                channel: "redisson_rwlock:{rw}",
                record: "",
                log: "",
                election_channel: "",
                queue: "",
                places: "",
                grants: "",
            },
            _ => Names {
                lock: "res",
                token: "{res}:token",
                channel: "redisson_lock__channel:{res}",
                record: "",
                log: "",
                election_channel: "",
                queue: "redisson_lock_queue:{res}",
                places: "redisson_lock_timeout:{res}",
                grants: "redlease_lock_grants:{res}",
            },
        }
    }
}

/// The semaphore's key (its count), its channel, and its size.
pub const SEMAPHORE: &str = "sem";
pub const SEMAPHORE_CHANNEL: &str = "redisson_sc:{sem}";
pub const SEMAPHORE_SIZE: u8 = 1;
/// A permit-expirable semaphore's permits out (id -> end of lease).
pub const PERMITS_OUT: &str = "{sem}:timeout";
/// A permit's lease, in ms: two steps of the clock, so that a search of two steps reaches a
/// permit given back by its lease's end.
pub const PERMIT_LEASE_MS: u64 = 2000;

/// The key guarded writes write to.
pub const DATA: &str = "{res}:data";

/// The latch's key, and its channel.
pub const LATCH: &str = "latch";
pub const LATCH_CHANNEL: &str = "redisson_countdownlatch__channel:{latch}";

/// A call the client waits for the answer of: its number, when it was first sent, its
/// deadline, and how many times it was sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Waiting {
    pub seq: u16,
    pub call: Call,
    pub sent_at: u64,
    pub deadline: u64,
    pub sends: u8,
}

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Idle,
    /// A try of the lock (or a campaign) is out.
    Trying(Waiting),
    /// The lock is held by its guard, valid until `valid_until` by the client's clock: the
    /// leader too, once announced. A renewal may be out.
    Holding {
        token: u64,
        valid_until: u64,
        renewal: Option<Waiting>,
    },
    /// The lock is held, and a call made under it is out: the election's candidate's
    /// announcement of itself, or a guarded write.
    Calling {
        token: u64,
        valid_until: u64,
        call: Waiting,
    },
    /// A fair lock's waiter whose last try found the lock held: that try was sent at
    /// `held_at`, and the fencing token counter was `counter` then (a grant made later has a
    /// larger token).
    Queued {
        counter: u64,
        held_at: u64,
    },
    /// A semaphore's permit is held, until `valid_until` by the client's clock (`u64::MAX`:
    /// a permit without a lease).
    HoldingPermit {
        valid_until: u64,
    },
    /// A request is out: a release (or resignation), a count-down, a take or a give-back of a
    /// permit.
    Requesting(Waiting),
    Done,
}

/// The undo of a try whose answer never came, sent until answered (the cleanup thread).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Undo {
    pub call: Waiting,
    pub out: bool,
    /// Not sent again before then: a copy of the try may come until its deadline.
    pub not_before: u64,
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub id: u8,
    pub step: Step,
    /// The number of its last call.
    pub seq: u16,
    /// Its acquisition chain: a new one after a try whose outcome is unknown.
    pub chain: u8,
    /// Whether it started its one round.
    pub started: bool,
    /// Renewals sent (one at most).
    pub renewals: u8,
    /// Its undos not yet answered for good, oldest first.
    pub undos: Vec<Undo>,
    /// A fair-lock waiter's tries in its wait, the chain whose channel it hears grants on
    /// (subscribed once a try found the lock held), and the last grant heard there, not yet
    /// read (its fencing token).
    pub tries: u8,
    pub subscribed: Option<u8>,
    pub letter: Option<u64>,
    /// Guarded writes made (one at most).
    pub writes: u8,
    /// The upgradable reader's upgrade tries, and the write lock it upgraded to, while it
    /// holds it.
    pub upgrade_tries: u8,
    pub writing: Option<Writing>,
}

/// The write lock an upgrade took: until when it is valid by the client's clock, and the id
/// of the try whose grant it is (its release names it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Writing {
    pub until: u64,
    pub try_id: String,
}

/// What a client may do on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Choice {
    Start,
    Renew,
    Release,
    /// Stop waiting for the answer it waits for (a response timeout).
    TimeOut,
    /// Send the undo again: unanswered (its response timeout), or answered that a copy of
    /// the try may still come, once the try's deadline has passed.
    SendUndo(u8),
    /// A fair-lock waiter tries again (woken, or its pause ended) with the same chain.
    TryAgain,
    /// A fair-lock waiter's wait ends without the lock (its deadline): it leaves the queue.
    GiveUp,
    /// The holder makes a guarded write.
    Write,
    /// The upgradable reader tries to upgrade to the write lock.
    Upgrade,
}

impl Client {
    pub fn new(id: u8) -> Self {
        Client {
            id,
            step: Step::Idle,
            seq: 0,
            chain: 0,
            started: false,
            renewals: 0,
            undos: Vec::new(),
            tries: 0,
            subscribed: None,
            letter: None,
            writes: 0,
            upgrade_tries: 0,
            writing: None,
        }
    }

    /// The holder id of its current chain.
    pub fn holder(&self) -> String {
        holder_id(self.id, self.chain)
    }

    /// Whether it takes a read-write lock's read lock or upgradable read (else its write
    /// lock) in `scenario`.
    pub fn reads(&self, scenario: Scenario) -> bool {
        match scenario {
            Scenario::ReadWrite => self.id.is_multiple_of(2),
            _ => scenario == Scenario::Upgradable,
        }
    }

    /// Whether it takes the upgradable read (and upgrades it) in `scenario`.
    pub fn upgrades(&self, scenario: Scenario) -> bool {
        scenario == Scenario::Upgradable && self.id.is_multiple_of(2)
    }

    /// Whether it holds the write lock by its own clock at `now`: a read-write lock's writer
    /// by its hold, the upgradable reader by its upgrade's.
    pub fn writes_at(&self, now: u64, scenario: Scenario) -> bool {
        match scenario {
            Scenario::Upgradable => self.writing.as_ref().is_some_and(|hold| now < hold.until),
            _ => !self.reads(scenario) && self.holds_at(now),
        }
    }

    /// The field of the lock's hash its current chain holds it by in `scenario`: a
    /// read-write lock's writer's is its holder id with `:write`.
    pub fn field(&self, scenario: Scenario) -> String {
        match scenario == Scenario::ReadWrite && !self.reads(scenario) {
            true => format!("{}:write", self.holder()),
            false => self.holder(),
        }
    }

    /// Whether it holds the lock by its own clock at `now`.
    pub fn holds_at(&self, now: u64) -> bool {
        match &self.step {
            Step::Holding { valid_until, .. } | Step::Calling { valid_until, .. } => {
                now < *valid_until
            }
            _ => false,
        }
    }

    /// What it may do now, on its own, in `scenario` (a leader renews no lease: the lock's
    /// scenario checks renewals).
    pub fn choices(&self, now: u64, scenario: Scenario, out: &mut Vec<Choice>) {
        let max_renewals = match scenario {
            Scenario::Lock => MAX_RENEWALS,
            _ => 0,
        };
        match &self.step {
            Step::Idle if !self.started => out.push(Choice::Start),
            // A guard whose lease ran out by its clock still sends its release when dropped.
            Step::Holding { renewal, .. } => {
                out.push(Choice::Release);
                if scenario == Scenario::Guarded && self.writes == 0 && renewal.is_none() {
                    out.push(Choice::Write);
                }
                let upgrades = self.upgrades(scenario) && self.writing.is_none();
                if upgrades && self.upgrade_tries < MAX_UPGRADE_TRIES && self.holds_at(now) {
                    out.push(Choice::Upgrade);
                }
                if self.holds_at(now) && renewal.is_none() && self.renewals < max_renewals {
                    out.push(Choice::Renew);
                }
            }
            Step::HoldingPermit { .. } => out.push(Choice::Release),
            Step::Queued { .. } => {
                out.push(Choice::GiveUp);
                if self.tries < MAX_FAIR_TRIES {
                    out.push(Choice::TryAgain);
                }
            }
            Step::Trying(_) | Step::Calling { .. } | Step::Requesting(_) => {
                out.push(Choice::TimeOut)
            }
            _ => {}
        }
        for (index, undo) in self.undos.iter().enumerate() {
            if undo.call.sends < MAX_UNDO_SENDS && (undo.out || now > undo.not_before) {
                out.push(Choice::SendUndo(index as u8));
            }
        }
    }
}

/// The release (or resignation) of `client`'s hold in `scenario`, its answer kept under
/// `receipt` until `keep_until`; its deadline is the caller's to add.
fn release_call(client: &Client, scenario: Scenario, receipt: &str, keep_until: u64) -> Call {
    let names = scenario.names();
    let holder = client.holder();
    let call = match scenario {
        Scenario::Election => {
            let keys = [names.lock, names.channel, receipt, names.record, names.log];
            let keys = [&keys[..], &[names.election_channel]].concat();
            Call::new("election::RESIGN", &keys)
        }
        Scenario::Fair => {
            let keys = [names.lock, names.queue, names.places, receipt, names.grants];
            Call::new("fair::RELEASE", &[&keys[..], &[names.token]].concat())
        }
        Scenario::ReadWrite | Scenario::Upgradable if client.reads(scenario) => Call::new(
            "rwlock::READ_RELEASE",
            &[names.lock, names.channel, receipt],
        ),
        Scenario::ReadWrite => {
            // Not an upgrade: no try's grant to name.
            return write_release_call(&client.field(scenario), receipt, keep_until).arg("");
        }
        _ => Call::new(
            "plain::RELEASE",
            &[names.lock, names.channel, receipt, names.token],
        ),
    };
    let call = call
        .arg(&holder)
        .arg(LEASE_MS)
        .arg(keep_until)
        .arg("0")
        .arg(0);
    match scenario {
        Scenario::Election => call.arg(1000),
        Scenario::Fair => call.arg(names.channel).arg(PLACE_MS),
        Scenario::ReadWrite | Scenario::Upgradable => call.arg(RW_PREFIX).arg("1"),
        // No handoff: the field of the chain to hand the lock to, and its lease.
        _ => call.arg("").arg(0),
    }
}

/// The release of a read-write lock's write lock held by the field `field`, its answer kept
/// under `receipt` until `keep_until` (every waiter woken, no handoff); the id of the upgrade
/// try whose grant it releases (`""`: not an upgrade) and its deadline are the caller's to
/// add.
fn write_release_call(field: &str, receipt: &str, keep_until: u64) -> Call {
    let names = Scenario::ReadWrite.names();
    let keys = [names.lock, names.channel, receipt, names.token];
    Call::new("rwlock::WRITE_RELEASE", &keys)
        .arg(field)
        .arg(LEASE_MS)
        .arg(keep_until)
        .arg("1")
        .arg(0)
        .arg(RW_PREFIX)
        .arg("")
        .arg(0)
}

/// The prefix of a read-write lock's derived keys.
const RW_PREFIX: &str = "{rw}:";

/// The prefix of the timeout keys of the read levels of the chain `holder`.
fn read_level_prefix(holder: &str) -> String {
    format!("{RW_PREFIX}{holder}:rwlock_timeout")
}

pub fn holder_id(client: u8, chain: u8) -> String {
    format!("c{client}:{chain}")
}

/// The key a request of `client` keeps its answer under: its count-down, its guarded write,
/// or its take or give-back of a permit (`what`).
pub fn request_key(client: u8, what: &str) -> String {
    match what {
        "" => format!("{{{LATCH}}}:request:c{client}"),
        "write" => format!("{{res}}:request:write:c{client}"),
        _ => format!("{{{SEMAPHORE}}}:request:{what}:c{client}"),
    }
}

/// A call of `script` for client `c`'s take or give-back (`what`) of its permit: the keys
/// (the semaphore, its channel, its permits out, the request's key) and the permit's id.
fn permit_call(script: &'static str, c: u8, what: &str) -> Call {
    let keys = [
        SEMAPHORE,
        SEMAPHORE_CHANNEL,
        PERMITS_OUT,
        &request_key(c, what),
    ];
    Call::new(script, &keys).arg(permit_id(c))
}

/// The id of client `c`'s permit.
fn permit_id(c: u8) -> String {
    format!("permit-c{c}")
}

/// The key a release of `holder` keeps its answer under.
fn receipt_key(lock: &str, holder: &str) -> String {
    format!("{{{lock}}}:release:{holder}")
}

/// A request's deadline and until when its answer is kept, for a request made at `now`:
/// `SEND_FOR_MS` and `KEEP_AFTER_MS` after. With the old behaviour, no deadline (one far
/// off), and the answer kept as long from the send.
fn request_window(world: &World, now: u64) -> (u64, u64) {
    let deadline = now + SEND_FOR_MS;
    let keep_until = deadline + KEEP_AFTER_MS;
    match world.config.old.no_request_deadlines {
        true => (u64::MAX / 4, keep_until),
        false => (deadline, keep_until),
    }
}

impl World {
    /// Client `c` does `choice`.
    pub fn act(&mut self, c: u8, choice: Choice) {
        let scenario = self.config.scenario;
        match choice {
            Choice::Start => self.start(c, scenario),
            Choice::Renew => self.renew(c),
            Choice::Release => self.release(c, scenario),
            Choice::TimeOut => self.time_out(c),
            Choice::TryAgain => self.try_lock(c, scenario),
            Choice::Write => self.write(c),
            Choice::Upgrade => self.upgrade(c),
            Choice::GiveUp => {
                self.clients[c as usize].step = Step::Done;
                self.leave_queue(c);
            }
            Choice::SendUndo(index) => {
                let client = &mut self.clients[c as usize];
                let Some(undo) = client.undos.get_mut(index as usize) else {
                    return;
                };
                undo.out = true;
                undo.call.sends += 1;
                let message = message(c, undo.call.seq, &undo.call.call);
                self.send(message);
            }
        }
    }

    /// Sends `call` from client `c` as a new call; answers what it waits for.
    fn call(&mut self, c: u8, call: Call, deadline: u64) -> Waiting {
        let now = self.now();
        let client = &mut self.clients[c as usize];
        client.seq += 1;
        let waiting = Waiting {
            seq: client.seq,
            call,
            sent_at: now,
            deadline,
            sends: 1,
        };
        self.send(message(c, waiting.seq, &waiting.call));
        waiting
    }

    fn start(&mut self, c: u8, scenario: Scenario) {
        self.clients[c as usize].started = true;
        match scenario {
            Scenario::Latch => {
                let keys = [LATCH, LATCH_CHANNEL, &request_key(c, "")];
                self.request(c, Call::new("latch::COUNT_DOWN", &keys).arg("0"));
            }
            Scenario::Semaphore => {
                let keys = [SEMAPHORE, &request_key(c, "take")];
                self.request(c, Call::new("semaphore::TAKE", &keys).arg(1));
            }
            Scenario::Permits => {
                let call = permit_call("semaphore::PERMIT_TAKE", c, "take");
                self.request(c, call.arg(PERMIT_LEASE_MS));
            }
            _ => self.try_lock(c, scenario),
        }
    }

    /// One try of the lock, by the client's current chain.
    fn try_lock(&mut self, c: u8, scenario: Scenario) {
        let names = scenario.names();
        let deadline = self.now() + SEND_FOR_MS;
        let client = &mut self.clients[c as usize];
        client.tries += 1;
        let holder = client.holder();
        let call = match scenario {
            Scenario::Fair => {
                // A waiter hears grants on the channel of the chain it subscribed with (or
                // of none yet: the try after subscribing finds a grant it missed).
                let grants = client.subscribed.is_none_or(|chain| chain == client.chain);
                let keys = [
                    names.lock,
                    names.queue,
                    names.places,
                    names.token,
                    names.grants,
                ];
                Call::new("fair::ACQUIRE", &keys)
                    .arg(LEASE_MS)
                    .arg(&holder)
                    .arg(0)
                    .arg(PLACE_MS)
                    .arg(u8::from(grants))
            }
            Scenario::Upgradable if client.upgrades(scenario) => {
                Call::new("rwlock::UPGRADABLE_ACQUIRE", &[names.lock, names.token])
                    .arg(LEASE_MS)
                    .arg(&holder)
                    .arg(0)
                    .arg(read_level_prefix(&holder))
                    .arg(RW_PREFIX)
                    // The client holds no write lock to read beside.
                    .arg("")
            }
            Scenario::ReadWrite | Scenario::Upgradable if client.reads(scenario) => {
                Call::new("rwlock::READ_ACQUIRE", &[names.lock, names.token])
                    .arg(LEASE_MS)
                    .arg(&holder)
                    .arg(0)
                    .arg(read_level_prefix(&holder))
                    .arg("")
            }
            Scenario::ReadWrite => Call::new("rwlock::WRITE_ACQUIRE", &[names.lock, names.token])
                .arg(LEASE_MS)
                .arg(client.field(scenario))
                .arg(0)
                .arg(&holder)
                .arg(RW_PREFIX)
                .arg(""),
            _ => Call::new("plain::ACQUIRE", &[names.lock, names.token])
                .arg(LEASE_MS)
                .arg(&holder)
                .arg(0),
        }
        .arg(deadline);
        let waiting = self.call(c, call, deadline);
        self.clients[c as usize].step = Step::Trying(waiting);
    }

    fn renew(&mut self, c: u8) {
        let lock = self.config.scenario.names().lock;
        let call = Call::new("renew::RENEW", &[lock])
            .arg(LEASE_MS)
            .arg("field")
            .arg(self.clients[c as usize].holder())
            .arg("");
        let now = self.now();
        let waiting = self.call(c, call, now + SEND_FOR_MS);
        self.clients[c as usize].renewals += 1;
        if let Step::Holding { renewal, .. } = &mut self.clients[c as usize].step {
            *renewal = Some(waiting);
        }
    }

    fn release(&mut self, c: u8, scenario: Scenario) {
        if matches!(scenario, Scenario::Semaphore | Scenario::Permits) {
            return self.give_permit_back(c, scenario);
        }
        if self.clients[c as usize].writing.is_some() {
            return self.release_upgrade(c);
        }
        let client = &self.clients[c as usize];
        let receipt = receipt_key(scenario.names().lock, &client.holder());
        let (deadline, keep_until) = request_window(self, self.now());
        let call = release_call(client, scenario, &receipt, keep_until).arg(deadline);
        let waiting = self.call(c, call, deadline);
        self.clients[c as usize].step = Step::Requesting(waiting);
    }

    /// The upgradable reader's try of the write lock, under its read hold: the write lock's
    /// try with its chain's holder id and an id of its own (so that its undo takes back no
    /// later try's grant).
    fn upgrade(&mut self, c: u8) {
        let client = &mut self.clients[c as usize];
        client.upgrade_tries += 1;
        let holder = client.holder();
        // As the crate's request ids: `<client id>:<number>`, numbered in the order made.
        let try_id = format!("client{c}:{}", client.seq + 1);
        let names = Scenario::Upgradable.names();
        let deadline = self.now() + SEND_FOR_MS;
        let call = Call::new("rwlock::WRITE_ACQUIRE", &[names.lock, names.token])
            .arg(LEASE_MS)
            .arg(format!("{holder}:write"))
            .arg(0)
            .arg(&holder)
            .arg(RW_PREFIX)
            .arg(try_id)
            .arg(deadline);
        self.call_under_hold(c, call, deadline);
    }

    /// The upgrade's write lock released (its guard dropped, so that the client holds it no
    /// more), naming the try whose grant it releases: the read hold stays, and the client may
    /// upgrade again.
    fn release_upgrade(&mut self, c: u8) {
        let client = &mut self.clients[c as usize];
        let Some(writing) = client.writing.take() else {
            unreachable!("an upgrade is released while it is held");
        };
        let field = format!("{}:write", client.holder());
        // A receipt of its own, as every release of the crate's has: the chain's next
        // upgrade's release must not find this one's answer.
        let release = format!("{field}:{}", writing.try_id);
        let receipt = receipt_key(Scenario::Upgradable.names().lock, &release);
        let (deadline, keep_until) = request_window(self, self.now());
        let call = write_release_call(&field, &receipt, keep_until)
            .arg(writing.try_id)
            .arg(deadline);
        self.call_under_hold(c, call, deadline);
    }

    /// Sends `call`, whose deadline is `deadline`, under client `c`'s hold: the client waits
    /// for its answer, holding.
    fn call_under_hold(&mut self, c: u8, call: Call, deadline: u64) {
        let Step::Holding {
            token, valid_until, ..
        } = self.clients[c as usize].step
        else {
            unreachable!("a call under a hold is made while holding");
        };
        let waiting = self.call(c, call, deadline);
        self.clients[c as usize].step = Step::Calling {
            token,
            valid_until,
            call: waiting,
        };
    }

    /// The undo of the upgrade try `tried` whose answer did not come: only that try's grant
    /// is taken back; the read hold stays.
    fn give_up_upgrade(&mut self, c: u8, tried: Waiting) {
        let names = Scenario::Upgradable.names();
        let not_before = tried.deadline.max(self.now() + SEND_FOR_MS);
        let call = Call::new("rwlock::UNDO", &[names.lock, names.channel])
            .arg(String::from_utf8_lossy(&tried.call.args[1]))
            .arg(0)
            .arg("")
            .arg("1")
            .arg(String::from_utf8_lossy(&tried.call.args[5]))
            .arg(not_before);
        self.queue_undo(c, call, not_before, not_before);
    }

    /// Sends the undo `call` (whose deadline is `deadline`) from client `c` now, and keeps it
    /// for the cleanup, which sends it again until answered (and once answered that a copy
    /// of what it undoes may still come, not before `not_before`).
    fn queue_undo(&mut self, c: u8, call: Call, deadline: u64, not_before: u64) {
        let undo = self.call(c, call, deadline);
        self.clients[c as usize].undos.push(Undo {
            call: undo,
            out: true,
            not_before,
        });
    }

    /// A guarded write by the holder: one more to the data, while its hold stands.
    fn write(&mut self, c: u8) {
        let client = &mut self.clients[c as usize];
        client.writes += 1;
        let holder = client.holder();
        let lock = self.config.scenario.names().lock;
        let (deadline, keep_until) = request_window(self, self.now());
        let keys = [DATA, lock, &request_key(c, "write")];
        let call = Call::new("guarded::GUARDED_WRITE", &keys)
            .arg("incrby")
            .arg(1)
            .arg("")
            .arg(holder)
            .arg(deadline)
            .arg(keep_until);
        self.call_under_hold(c, call, deadline);
    }

    /// Sends `call` from client `c` as a request, its deadline and until when its answer is
    /// kept (`request_window`) its last arguments; the client waits for its answer.
    fn request(&mut self, c: u8, call: Call) {
        let (deadline, keep_until) = request_window(self, self.now());
        let call = call.arg(deadline).arg(keep_until);
        let waiting = self.call(c, call, deadline);
        self.clients[c as usize].step = Step::Requesting(waiting);
    }

    /// Gives the permit back: a request adding one, or giving back the permit by its id.
    fn give_permit_back(&mut self, c: u8, scenario: Scenario) {
        let call = match scenario {
            Scenario::Permits => permit_call("semaphore::PERMIT_RELEASE", c, "give"),
            _ => Call::new(
                "semaphore::ADD",
                &[SEMAPHORE, SEMAPHORE_CHANNEL, &request_key(c, "give")],
            )
            .arg(1),
        };
        self.request(c, call);
    }

    /// The client stops waiting for its answer: a request is sent again while its deadline
    /// has not passed; a try is given up (undone, and the next try is a new chain's); an
    /// announcement is sent again while the lease lasts.
    fn time_out(&mut self, c: u8) {
        let now = self.now();
        let client = &mut self.clients[c as usize];
        let (waiting, resent) = match &mut client.step {
            Step::Trying(waiting) => (waiting, false),
            Step::Requesting(waiting) => (waiting, true),
            // An upgrade is a try: sent once.
            Step::Calling { call, .. } => {
                let resent = call.call.script != "rwlock::WRITE_ACQUIRE";
                (call, resent)
            }
            _ => return,
        };
        if resent && waiting.sends < MAX_SENDS && now < waiting.deadline {
            waiting.sends += 1;
            let message = message(c, waiting.seq, &waiting.call);
            self.send(message);
            return;
        }
        match std::mem::replace(&mut client.step, Step::Done) {
            Step::Trying(waiting) => self.give_up_try(c, waiting),
            Step::Requesting(waiting)
                if matches!(
                    waiting.call.script,
                    "semaphore::TAKE" | "semaphore::PERMIT_TAKE"
                ) =>
            {
                self.give_up_take(c, waiting)
            }
            Step::Calling {
                token,
                valid_until,
                call,
            } => self.call_unanswered(c, token, valid_until, call),
            Step::Requesting(_) => {}
            _ => unreachable!("a step that waits"),
        }
    }

    /// A call made under the hold (valid until `valid_until`, with `token`) went unanswered:
    /// an announcement drops the guard, which resigns; an upgrade's try is undone; the outcome
    /// of a guarded write or of the upgrade's release is told. The guard stays but for the
    /// announcement.
    fn call_unanswered(&mut self, c: u8, token: u64, valid_until: u64, call: Waiting) {
        let script = call.call.script;
        if script == "election::ANNOUNCE" {
            return self.release(c, Scenario::Election);
        }
        let client = &mut self.clients[c as usize];
        client.step = Step::Holding {
            token,
            valid_until,
            renewal: None,
        };
        if script == "rwlock::WRITE_ACQUIRE" {
            self.give_up_upgrade(c, call);
        }
    }

    /// A try whose answer did not come, or came after its lease: its undo is queued (sent
    /// behind it now, and by the cleanup until answered), and the client is done with the
    /// chain.
    fn give_up_try(&mut self, c: u8, tried: Waiting) {
        let holder = self.clients[c as usize].holder();
        // Announced while its try was out (the old behaviour), never to lead: a phantom.
        self.ghost.phantom |= self.ghost.announced_trying.contains(&holder);
        self.undo_chain(c, tried.deadline);
    }

    /// A fair-lock waiter whose wait ends without the lock leaves the queue: the undo of its
    /// chain's tries.
    fn leave_queue(&mut self, c: u8) {
        self.undo_chain(c, 0);
    }

    /// Queues the undo of what the tries of client `c`'s chain may have added (its place in
    /// a fair lock's queue too), the last of them with the deadline `tried_deadline`: sent
    /// now, and by the cleanup until answered, not before every try of the chain made so far
    /// has passed its deadline (as if made now, after the last: the crate does not track
    /// them). The client's next try is a new chain's.
    fn undo_chain(&mut self, c: u8, tried_deadline: u64) {
        let names = self.config.scenario.names();
        let holder = self.clients[c as usize].holder();
        let not_before = tried_deadline.max(self.now() + SEND_FOR_MS);
        let call = match self.config.scenario {
            Scenario::Fair => {
                let keys = [names.lock, names.queue, names.places, names.grants];
                Call::new("fair::UNDO", &keys)
                    .arg(&holder)
                    .arg(0)
                    .arg("0")
                    .arg(names.channel)
                    .arg(PLACE_MS)
            }
            scenario @ (Scenario::ReadWrite | Scenario::Upgradable) => {
                let client = &self.clients[c as usize];
                let prefix = match client.reads(scenario) {
                    true => read_level_prefix(&holder),
                    false => String::new(),
                };
                Call::new("rwlock::UNDO", &[names.lock, names.channel])
                    .arg(client.field(scenario))
                    .arg(0)
                    .arg(prefix)
                    .arg("1")
                    .arg("")
            }
            _ => Call::new("plain::UNDO", &[names.lock, names.channel])
                .arg(&holder)
                .arg(0)
                .arg("0"),
        }
        .arg(not_before);
        self.queue_undo(c, call, not_before, not_before);
        self.clients[c as usize].chain += 1;
    }

    /// A take of a permit whose answer did not come: its undo (which gives the permit back
    /// if the take ran, and keeps a later copy from running) is sent until answered.
    fn give_up_take(&mut self, c: u8, took: Waiting) {
        let call = match took.call.script {
            "semaphore::PERMIT_TAKE" => permit_call("semaphore::PERMIT_UNDO_TAKE", c, "take"),
            _ => Call::new(
                "semaphore::UNDO_TAKE",
                &[SEMAPHORE, SEMAPHORE_CHANNEL, &request_key(c, "take")],
            )
            .arg(1),
        };
        // The take's deadline and until when its answer is kept: its last two arguments.
        let window = &took.call.args[took.call.args.len() - 2..];
        let call = call
            .arg(String::from_utf8_lossy(&window[0]))
            .arg(String::from_utf8_lossy(&window[1]));
        self.queue_undo(c, call, took.deadline, 0);
    }

    /// The answer to client `c`'s call `seq` arrives; an answer to a call it no longer waits
    /// for is dropped.
    pub fn receive(&mut self, c: u8, seq: u16, reply: Reply) {
        let client = &mut self.clients[c as usize];
        if let Some(at) = client.undos.iter().position(|undo| undo.call.seq == seq) {
            match reply.as_pair() {
                Some((-1, _)) => client.undos[at].out = false,
                _ => {
                    client.undos.remove(at);
                }
            }
            return;
        }
        let next = match &mut client.step {
            Step::Trying(waiting) if waiting.seq == seq => {
                let waiting = waiting.clone();
                return self.tried(c, reply, waiting);
            }
            Step::Holding {
                renewal: Some(renewal),
                valid_until,
                token,
            } if renewal.seq == seq => match reply {
                Reply::Array(items) if items.first() == Some(&Reply::Int(1)) => Step::Holding {
                    token: *token,
                    valid_until: (*valid_until).max(renewal.sent_at + LEASE_MS),
                    renewal: None,
                },
                _ => Step::Done,
            },
            Step::Calling {
                call,
                token,
                valid_until,
            } if call.seq == seq => {
                let (token, valid_until, call) = (*token, *valid_until, call.clone());
                return self.called(c, reply, token, valid_until, call);
            }
            Step::Requesting(waiting) if waiting.seq == seq => match (waiting.call.script, reply) {
                ("semaphore::TAKE", Reply::Int(1)) => Step::HoldingPermit {
                    valid_until: u64::MAX,
                },
                ("semaphore::PERMIT_TAKE", reply) if reply.as_pair() == Some((1, 0)) => {
                    Step::HoldingPermit {
                        valid_until: waiting.sent_at + PERMIT_LEASE_MS,
                    }
                }
                _ => Step::Done,
            },
            _ => return,
        };
        client.step = next;
    }

    /// The answer to a call made under the hold (valid until `valid_until`, with `token`): an
    /// announcement that did not make the candidate the leader drops the guard, which
    /// resigns; an upgrade that took the write lock holds it from its send, one that found
    /// the upgradable hold gone loses the guard.
    fn called(&mut self, c: u8, reply: Reply, token: u64, valid_until: u64, call: Waiting) {
        let client = &mut self.clients[c as usize];
        let holding = Step::Holding {
            token,
            valid_until,
            renewal: None,
        };
        match (call.call.script, reply.as_pair()) {
            ("election::ANNOUNCE", _) if reply != Reply::Int(1) => {
                self.release(c, Scenario::Election)
            }
            ("rwlock::WRITE_ACQUIRE", Some((4, _))) => client.step = Step::Done,
            ("rwlock::WRITE_ACQUIRE", Some((1, _))) => {
                client.writing = Some(Writing {
                    until: call.sent_at + LEASE_MS,
                    try_id: String::from_utf8_lossy(&call.call.args[5]).into_owned(),
                });
                client.step = holding;
            }
            _ => client.step = holding,
        }
    }

    /// A try's answer: the lock taken (the client holds it from the try's send on; an
    /// election's candidate announces itself first), or not (the client is done).
    fn tried(&mut self, c: u8, reply: Reply, waiting: Waiting) {
        let scenario = self.config.scenario;
        let Some((1, token)) = reply.as_pair() else {
            return self.not_taken(c, reply, waiting);
        };
        let valid_until = waiting.sent_at + LEASE_MS;
        if valid_until <= self.now() {
            // A grant that came after its lease ran out by the client's clock makes no guard:
            // it is given back (`NoGuard::Late`).
            self.clients[c as usize].step = Step::Done;
            return self.give_up_try(c, waiting);
        }
        let token = token as u64;
        if scenario != Scenario::Election || self.config.old.announce_in_acquisition {
            self.clients[c as usize].step = Step::Holding {
                token,
                valid_until,
                renewal: None,
            };
            return;
        }
        let holder = self.clients[c as usize].holder();
        let call = announce_call(&holder, &format!("value-{c}"), token);
        let waiting = self.call(c, call, valid_until);
        self.clients[c as usize].step = Step::Calling {
            token,
            valid_until,
            call: waiting,
        };
    }
}

impl World {
    /// A try's answer that did not take the lock: a fair-lock waiter is queued (it hears
    /// grants on its chain's channel from now on, and reads the one it heard, if any);
    /// otherwise the client is done, and leaves the queue if it was in it.
    fn not_taken(&mut self, c: u8, reply: Reply, waiting: Waiting) {
        let client = &mut self.clients[c as usize];
        match reply.as_queued() {
            Some(counter) if self.config.scenario == Scenario::Fair => {
                client.subscribed.get_or_insert(client.chain);
                client.step = Step::Queued {
                    counter,
                    held_at: waiting.sent_at,
                };
                self.read_letter(c);
            }
            _ => {
                client.step = Step::Done;
                if client.subscribed.is_some() {
                    self.leave_queue(c);
                }
            }
        }
    }

    /// A grant (its fencing token) on the channel of the chain `holder`, heard by client `c`
    /// if it subscribed to it; kept until its wait reads it.
    pub fn hear_grant(&mut self, c: u8, holder: &str, token: u64) {
        let client = &mut self.clients[c as usize];
        let Some(chain) = client.subscribed else {
            return;
        };
        if holder_id(c, chain) != holder {
            return;
        }
        client.letter = Some(token);
        if matches!(client.step, Step::Queued { .. }) {
            self.read_letter(c);
        }
    }

    /// A queued waiter reads the grant it heard: it holds the lock by it when the grant was
    /// made after its last try found the lock held (a larger token), for the lease from that
    /// try's send, unless that lease has run out by its clock (its next try then finds the
    /// grant, if it still stands). The grants' lease is the one asked for: `PLACE_MS` is
    /// no shorter.
    fn read_letter(&mut self, c: u8) {
        let now = self.now();
        let client = &mut self.clients[c as usize];
        let (Some(token), Step::Queued { counter, held_at }) = (client.letter, &client.step) else {
            return;
        };
        client.letter = None;
        let valid_until = held_at + LEASE_MS;
        if token > *counter && valid_until > now && client.subscribed == Some(client.chain) {
            client.step = Step::Holding {
                token,
                valid_until,
                renewal: None,
            };
            self.ghost.held_by_grant = true;
        }
    }
}

/// The announcement of the chain `holder` as the election's leader, with `value` and the
/// term `token`.
pub fn announce_call(holder: &str, value: &str, token: u64) -> Call {
    let names = Scenario::Election.names();
    Call::new(
        "election::ANNOUNCE",
        &[names.lock, names.record, names.log, names.election_channel],
    )
    .arg(holder)
    .arg(value)
    .arg(token)
    .arg(1000)
}

fn message(client: u8, seq: u16, call: &Call) -> Message {
    Message {
        client,
        seq,
        body: Body::Call(call.clone()),
    }
}

impl Client {
    /// Whether it waits for the answer to its call `seq`.
    pub fn awaits(&self, seq: u16) -> bool {
        let step = match &self.step {
            Step::Trying(waiting) | Step::Requesting(waiting) => Some(waiting.seq),
            Step::Calling { call, .. } => Some(call.seq),
            Step::Holding { renewal, .. } => renewal.as_ref().map(|renewal| renewal.seq),
            Step::Idle | Step::Done | Step::HoldingPermit { .. } | Step::Queued { .. } => None,
        };
        let undo = self
            .undos
            .iter()
            .any(|undo| undo.out && undo.call.seq == seq);
        step == Some(seq) || undo
    }
}

impl Client {
    /// Whether a grant on the channel of the chain `holder` may still be read by it: it
    /// subscribed to that channel, and waits for the lock.
    pub fn hears(&self, holder: &str) -> bool {
        let waits = matches!(self.step, Step::Queued { .. } | Step::Trying(_));
        waits && self.subscribed.map(|chain| holder_id(self.id, chain)) == Some(holder.into())
    }
}

impl Reply {
    /// A fair lock's answer `{0, ms to wait, the fencing token counter}`: the counter.
    pub fn as_queued(&self) -> Option<u64> {
        match self {
            Reply::Array(items) => match items.as_slice() {
                [Reply::Int(0), Reply::Int(_), Reply::Int(counter)] => Some(*counter as u64),
                _ => None,
            },
            _ => None,
        }
    }

    /// An answer `{a, b}` of two integers.
    pub fn as_pair(&self) -> Option<(i64, i64)> {
        match self {
            Reply::Array(items) => match items.as_slice() {
                [Reply::Int(a), Reply::Int(b)] => Some((*a, *b)),
                _ => None,
            },
            _ => None,
        }
    }
}
