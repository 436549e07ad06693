//! The model's server held to the real one: random sequences of the crate's scripts, with
//! random keys, arguments, deadlines and request ids, sent to a throwaway `redis-server` (or
//! the server `REDLEASE_REDIS_SERVER` names) and run on the model's keyspace; every reply and
//! the whole keyspace after each step must agree.
//!
//! The model's clock is set to the server's (`TIME`) before each step. Leases and kept
//! answers are long, and deadlines far from the clock (seconds before or after), so that the
//! milliseconds between the two runs decide nothing; times in replies and values (TTLs,
//! the server's time, stream ids) are compared to within `CLOCK_SLACK_MS`. Keys expire by a
//! step of their own (deleted on both), not by the clock.
//!
//! CI runs `STEPS` steps in `RUNS` runs; `REDLEASE_DIFFERENTIAL_STEPS` and
//! `REDLEASE_DIFFERENTIAL_SEED` run longer, or one seed again.

use std::collections::BTreeMap;

use redis::Value;
use redlease_model::keyspace::{Keyspace, Reply, Value as Stored};
use redlease_model::{lua, scripts};
use redlease_testing::RedisServer;

const RUNS: u64 = 8;
const STEPS: usize = 300;
/// How far apart a time in a reply or a value may be on the two servers, in ms.
const CLOCK_SLACK_MS: i64 = 500;
/// Leases and kept answers are at least this long, in ms: no key expires by the clock in a
/// run (CI's take seconds, one by hand a few minutes), whose end the two servers would see
/// a millisecond apart.
const LONG_MS: u64 = 600_000;
/// Integers at least this large are times (leases are longer, counts and tokens smaller).
const TIME_LIKE: i64 = 2000;

/// A small random number generator (xorshift), so a run is its seed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// One step: a script by its crate name with keys and arguments, or a key that expires.
enum Step {
    Script {
        name: &'static str,
        keys: Vec<String>,
        args: Vec<String>,
    },
    Expire(String),
    /// A key of the wrong type where a primitive's key should be.
    Plant(String),
    /// A permit whose lease ended a while ago, out of a permit-expirable semaphore: the next
    /// of its scripts gives it back.
    Expired(String),
}

const LOCKS: &[&str] = &["lock", "leader"];
const HOLDERS: &[&str] = &["h1", "h2", "h3"];

/// The words a random step is made of: a lock's (or an election's) keys, a holder, a
/// latch's request, and times around `now`.
struct Words {
    lock: &'static str,
    holder: &'static str,
    token: String,
    channel: String,
    receipt: String,
    request: String,
    record: String,
    log: String,
    election: String,
    deadline: String,
    keep_until: String,
    lease: String,
    levels: String,
}

impl Words {
    fn draw(random: &mut Random, now: u64) -> Words {
        let lock = *random.pick(LOCKS);
        let holder = *random.pick(HOLDERS);
        let deadline = match random.below(4) {
            0 => now - 3000,
            _ => now + 5000,
        };
        Words {
            lock,
            holder,
            token: format!("{{{lock}}}:token"),
            channel: format!("redisson_lock__channel:{{{lock}}}"),
            receipt: format!("{{{lock}}}:release:{holder}:{}", random.below(3)),
            request: format!("{{latch}}:request:{}", random.below(4)),
            record: format!("{{{lock}}}:record"),
            log: format!("{{{lock}}}:log"),
            election: format!("{{{lock}}}:election"),
            keep_until: (deadline.max(now) + LONG_MS).to_string(),
            deadline: deadline.to_string(),
            lease: (LONG_MS + 1000 * random.below(20)).to_string(),
            levels: random.below(3).to_string(),
        }
    }
}

fn script(name: &'static str, keys: &[&str], args: &[&str]) -> Step {
    Step::Script {
        name,
        keys: keys.iter().map(|key| (*key).to_owned()).collect(),
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
    }
}

/// A random step at `now`: a call of one of the modelled scripts, or a fault.
fn random_step(random: &mut Random, now: u64) -> Step {
    let words = Words::draw(random, now);
    match random.below(30) {
        0..=5 => lock_step(random, &words),
        6..=9 => latch_step(random, &words),
        10..=12 => election_step(random, &words),
        13..=15 => semaphore_step(random, &words),
        16..=19 => fair_step(random, &words),
        20..=22 => permit_step(random, &words),
        23 | 24 => guarded_step(random, &words),
        25..=28 => rwlock_step(random, &words),
        _ => fault_step(random, &words),
    }
}

/// A call of the lock's scripts.
fn lock_step(random: &mut Random, w: &Words) -> Step {
    let (lock, holder) = (w.lock, w.holder);
    match random.below(6) {
        0 | 1 => script(
            "plain::ACQUIRE",
            &[lock, &w.token],
            &[&w.lease, holder, &w.levels, &w.deadline],
        ),
        2 => {
            let hand_to = *random.pick(&["", "h1", "h3"]);
            script(
                "plain::RELEASE",
                &[lock, &w.channel, &w.receipt, &w.token],
                &[
                    holder,
                    &w.lease,
                    &w.keep_until,
                    "0",
                    &w.levels,
                    hand_to,
                    &w.lease,
                    &w.deadline,
                ],
            )
        }
        3 => script(
            "plain::UNDO",
            &[lock, &w.channel],
            &[holder, &w.levels, "0", &w.deadline],
        ),
        4 => script(
            "plain::FORCE_RELEASE",
            &[lock, &w.channel, &w.token, &w.request],
            &["0", "redlease:force", &w.deadline, &w.keep_until],
        ),
        _ => script(
            "renew::RENEW",
            &[lock],
            &[&w.lease, "field", holder, *random.pick(&["", "1500"])],
        ),
    }
}

/// The fair lock's keys: its hash, queue, places, fencing token counter, the waiters that
/// accept grants.
const FAIR: [&str; 5] = [
    "fair",
    "redisson_lock_queue:{fair}",
    "redisson_lock_timeout:{fair}",
    "{fair}:token",
    "redlease_lock_grants:{fair}",
];
const FAIR_CHANNEL: &str = "redisson_lock__channel:{fair}";

/// A call of the fair lock's scripts, whose places' waits are long and apart (so that no
/// two places' expiries fall within the two servers' clocks' difference).
fn fair_step(random: &mut Random, w: &Words) -> Step {
    let [lock, queue, places, token, grants] = FAIR;
    let holder = w.holder;
    let place = *random.pick(&["700000", "900000"]);
    let receipt = w.receipt.replace(w.lock, "fair");
    // Mostly new chains, so that waiters queue and releases grant.
    let levels = match random.below(4) {
        0 => &w.levels,
        _ => "0",
    };
    match random.below(10) {
        0..=4 => {
            let accepts = *random.pick(&["0", "1", "1"]);
            script(
                "fair::ACQUIRE",
                &FAIR,
                &[&w.lease, holder, levels, place, accepts, &w.deadline],
            )
        }
        5..=7 => script(
            "fair::RELEASE",
            &[lock, queue, places, &receipt, grants, token],
            &[
                holder,
                &w.lease,
                &w.keep_until,
                "0",
                levels,
                FAIR_CHANNEL,
                place,
                &w.deadline,
            ],
        ),
        8 => script(
            "fair::UNDO",
            &[lock, queue, places, grants],
            &[holder, levels, "0", FAIR_CHANNEL, place, &w.deadline],
        ),
        _ => script(
            "fair::FORCE_RELEASE",
            &[lock, queue, token, &w.request],
            &[
                "0",
                "redlease:force",
                FAIR_CHANNEL,
                &w.deadline,
                &w.keep_until,
            ],
        ),
    }
}

/// The read-write lock's keys: its hash, fencing token counter, channel, and the prefix of
/// its derived keys (a read level's timeout key, `{rw}:<holder>:rwlock_timeout:<n>`).
const RW: [&str; 4] = ["rw", "{rw}:token", "redisson_rwlock:{rw}", "{rw}:"];

/// A call of the read-write lock's scripts (the read lock's, the upgradable read's, the
/// write lock's and an upgrade's, their releases, undos and the forced release), or a read
/// level's timeout key that expires.
fn rwlock_step(random: &mut Random, w: &Words) -> Step {
    let [lock, token, channel, prefix] = RW;
    let holder = w.holder;
    let writer = format!("{holder}:write");
    let read_levels = format!("{prefix}{holder}:rwlock_timeout");
    // Upgrade tries of one client, of one digit and of two (ordered by length first), or a
    // plain write lock's.
    let upgrades = ["", "", "", "client:2", "client:9", "client:10", "client:11"];
    let upgrade = *random.pick(&upgrades);
    let receipt = w.receipt.replace(w.lock, "rw");
    // Mostly new chains, so that the lock is taken.
    let held = match random.below(4) {
        0 => &w.levels,
        _ => "0",
    };
    // A reader whose thread holds the write lock (by that field), or not.
    let beside = *random.pick(&["", "", "h1:write", "h2:write"]);
    let acquire = |name, args: &[&str]| script(name, &[lock, token], args);
    match random.below(12) {
        0 | 1 => acquire(
            "rwlock::READ_ACQUIRE",
            &[&w.lease, holder, held, &read_levels, beside, &w.deadline],
        ),
        2 => acquire(
            "rwlock::UPGRADABLE_ACQUIRE",
            &[
                &w.lease,
                holder,
                held,
                &read_levels,
                prefix,
                beside,
                &w.deadline,
            ],
        ),
        3..=5 => acquire(
            "rwlock::WRITE_ACQUIRE",
            &[
                &w.lease,
                &writer,
                held,
                holder,
                prefix,
                upgrade,
                &w.deadline,
            ],
        ),
        6 => script(
            "rwlock::READ_RELEASE",
            &[lock, channel, &receipt],
            &[
                holder,
                &w.lease,
                &w.keep_until,
                "0",
                &w.levels,
                prefix,
                "1",
                &w.deadline,
            ],
        ),
        7 | 8 => {
            let hand_to = *random.pick(&["", "h1:write", "h3:write"]);
            script(
                "rwlock::WRITE_RELEASE",
                &[lock, channel, &receipt, token],
                &[
                    &writer,
                    &w.lease,
                    &w.keep_until,
                    "1",
                    &w.levels,
                    prefix,
                    hand_to,
                    &w.lease,
                    upgrade,
                    &w.deadline,
                ],
            )
        }
        9 => {
            let (field, levels_prefix) = match random.below(2) {
                0 => (holder, read_levels.as_str()),
                _ => (writer.as_str(), ""),
            };
            script(
                "rwlock::UNDO",
                &[lock, channel],
                &[field, &w.levels, levels_prefix, "1", upgrade, &w.deadline],
            )
        }
        10 => script(
            "rwlock::FORCE_RELEASE",
            &[lock, channel, token, &w.request],
            &["1", "redlease:force", &w.deadline, &w.keep_until],
        ),
        _ => Step::Expire(format!("{read_levels}:{}", 1 + random.below(2))),
    }
}

/// A call of the latch's scripts.
fn latch_step(random: &mut Random, w: &Words) -> Step {
    let keys = ["latch", "latch:channel", &w.request];
    match random.below(4) {
        0 => {
            let count = (1 + random.below(3)).to_string();
            script(
                "latch::SET_COUNT",
                &keys,
                &[&count, "1", &w.deadline, &w.keep_until],
            )
        }
        1 => script("latch::DELETE", &keys, &["1", &w.deadline, &w.keep_until]),
        _ => script(
            "latch::COUNT_DOWN",
            &keys,
            &["0", &w.deadline, &w.keep_until],
        ),
    }
}

/// A call of the semaphore's scripts.
fn semaphore_step(random: &mut Random, w: &Words) -> Step {
    let keys = ["sem", "redisson_sc:{sem}", &w.request];
    let permits = (1 + random.below(2)).to_string();
    match random.below(4) {
        0 => script(
            "semaphore::TAKE",
            &["sem", &w.request],
            &[&permits, &w.deadline, &w.keep_until],
        ),
        1 => script(
            "semaphore::UNDO_TAKE",
            &keys,
            &[&permits, &w.deadline, &w.keep_until],
        ),
        2 => {
            let change = *random.pick(&["1", "2", "-1"]);
            script(
                "semaphore::ADD",
                &keys,
                &[change, &w.deadline, &w.keep_until],
            )
        }
        _ => script(
            "semaphore::SET",
            &keys,
            &[&permits, &w.deadline, &w.keep_until],
        ),
    }
}

/// A guarded write of one or two writes, by a holder of a lock (or of none).
fn guarded_step(random: &mut Random, w: &Words) -> Step {
    let mut keys = Vec::new();
    let mut args = Vec::new();
    for _ in 0..1 + random.below(2) {
        keys.push(*random.pick(&["data", "{data}:hash", "latch"]));
        let write: [&str; 3] = match random.below(4) {
            0 => ["set", "value", *random.pick(&["", "600000"])],
            1 => ["del", "", ""],
            2 => ["hset", "field", "value"],
            _ => ["incrby", *random.pick(&["1", "-2"]), ""],
        };
        args.extend(write);
    }
    keys.extend([w.lock, &w.request]);
    args.extend([w.holder, &w.deadline, &w.keep_until]);
    script("guarded::GUARDED_WRITE", &keys, &args)
}

/// A permit-expirable semaphore's permits out.
const PERMITS_OUT: &str = "{sem}:timeout";

/// A call of the permit-expirable semaphore's scripts (on the semaphore's count), or an
/// expired permit planted.
fn permit_step(random: &mut Random, w: &Words) -> Step {
    let keys = ["sem", "redisson_sc:{sem}", PERMITS_OUT, &w.request];
    let id = format!("permit-{}", w.holder);
    match random.below(6) {
        0 | 1 => script(
            "semaphore::PERMIT_TAKE",
            &keys,
            &[&id, &w.lease, &w.deadline, &w.keep_until],
        ),
        2 => script(
            "semaphore::PERMIT_RELEASE",
            &keys,
            &[&id, &w.deadline, &w.keep_until],
        ),
        3 => script(
            "semaphore::PERMIT_UNDO_TAKE",
            &keys,
            &[&id, &w.deadline, &w.keep_until],
        ),
        4 => {
            let change = *random.pick(&["1", "2", "-1"]);
            script(
                "semaphore::PERMIT_ADD",
                &keys,
                &[change, &w.deadline, &w.keep_until],
            )
        }
        _ => Step::Expired(id),
    }
}

/// A call of the election's scripts.
fn election_step(random: &mut Random, w: &Words) -> Step {
    let (lock, holder) = (w.lock, w.holder);
    match random.below(3) {
        0 => script(
            "election::ANNOUNCE",
            &[lock, &w.record, &w.log, &w.election],
            &[holder, "value", &random.below(20).to_string(), "1000"],
        ),
        1 => script(
            "election::RESIGN",
            &[lock, &w.channel, &w.receipt, &w.record, &w.log, &w.election],
            &[
                holder,
                &w.lease,
                &w.keep_until,
                "0",
                &w.levels,
                "1000",
                &w.deadline,
            ],
        ),
        _ => script("election::READ_LEADER", &[lock, &w.record, &w.log], &[]),
    }
}

/// A key that expires, or one of the wrong type planted.
fn fault_step(random: &mut Random, w: &Words) -> Step {
    match random.below(4) {
        0 => {
            let keys = [w.lock, "latch", &w.record, "sem", FAIR[1], FAIR[2], RW[0]];
            Step::Plant((*random.pick(&keys)).to_owned())
        }
        _ => {
            let keys = [w.lock, "latch", &w.request, &w.receipt, &w.token, "sem"];
            let keys = [&keys[..], &FAIR[..], &RW[..2]].concat();
            Step::Expire((*random.pick(&keys)).to_owned())
        }
    }
}

fn from_redis(value: redis::RedisResult<Value>) -> Reply {
    match value {
        Err(error) => Reply::Error(format!(
            "{} {}",
            error.code().unwrap_or("ERR"),
            error.detail().unwrap_or("")
        )),
        Ok(value) => reply_of(value),
    }
}

fn reply_of(value: Value) -> Reply {
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(number) => Reply::Int(number),
        Value::BulkString(bytes) => Reply::Bulk(bytes),
        Value::SimpleString(text) => Reply::Status(text),
        Value::Okay => Reply::Status("OK".into()),
        Value::Array(items) => Reply::Array(items.into_iter().map(reply_of).collect()),
        Value::ServerError(error) => Reply::Error(format!(
            "{} {}",
            error.code(),
            error.details().unwrap_or("")
        )),
        other => Reply::Error(format!("UNEXPECTED {other:?}")),
    }
}

/// Publications as text, for a failure's message.
fn texts(published: &[(Vec<u8>, Vec<u8>)]) -> Vec<(String, String)> {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    published
        .iter()
        .map(|(channel, message)| (text(channel), text(message)))
        .collect()
}

fn close(a: i64, b: i64) -> bool {
    a == b || (a.min(b) >= TIME_LIKE && (a - b).abs() <= CLOCK_SLACK_MS)
}

/// TTLs equal, or both counting down and close enough: a TTL is a time, however short it
/// has become (a long run outlasts the shorter ones).
fn same_ttl(a: i64, b: i64) -> bool {
    a == b || (a >= 0 && b >= 0 && (a - b).abs() <= CLOCK_SLACK_MS)
}

/// Bytes equal, or both times (a number or a stream id) close enough.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return true;
    }
    let time = |bytes: &[u8]| -> Option<i64> {
        let text = std::str::from_utf8(bytes).ok()?;
        text.split('-').next()?.parse().ok()
    };
    matches!((time(a), time(b)), (Some(a), Some(b)) if close(a, b))
}

fn same_reply(real: &Reply, model: &Reply) -> bool {
    match (real, model) {
        (Reply::Int(a), Reply::Int(b)) => close(*a, *b),
        (Reply::Bulk(a), Reply::Bulk(b)) => same_bytes(a, b),
        (Reply::Error(_), Reply::Error(_)) => real.error_code() == model.error_code(),
        (Reply::Array(a), Reply::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_reply(a, b))
        }
        _ => real == model,
    }
}

/// The real server's keys, each as its type, TTL and value in the words `reply_of` makes.
fn dump_real(connection: &mut redis::Connection) -> BTreeMap<String, (String, i64, Reply)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(connection).expect("KEYS");
    let mut dump = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query(connection)
            .expect("TYPE");
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query(connection)
            .expect("PTTL");
        let read = match kind.as_str() {
            "string" => redis::cmd("GET").arg(&key).clone(),
            "hash" => redis::cmd("HGETALL").arg(&key).clone(),
            "list" => redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).clone(),
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .clone(),
            _ => redis::cmd("XRANGE").arg(&key).arg("-").arg("+").clone(),
        };
        // A hash's fields in their order (a small hash keeps the order they came in).
        let value = from_redis(read.query(connection));
        dump.insert(key, (kind, ttl, value));
    }
    dump
}

/// The model's keys in the same words.
fn dump_model(server: &mut Keyspace) -> BTreeMap<String, (String, i64, Reply)> {
    let keys: Vec<String> = server.entries.keys().cloned().collect();
    let mut dump = BTreeMap::new();
    for key in keys {
        let Some(entry) = server.get(&key).cloned() else {
            continue;
        };
        let ttl = entry
            .expires_at
            .map_or(-1, |at| (at - server.now_ms) as i64);
        let value = match &entry.value {
            Stored::Str(bytes) => Reply::Bulk(bytes.clone()),
            Stored::Hash(_) => server.call(&words(&["HGETALL", &key])),
            Stored::List(_) => server.call(&words(&["LRANGE", &key, "0", "-1"])),
            Stored::ZSet(_) => server.call(&words(&["ZRANGE", &key, "0", "-1", "WITHSCORES"])),
            Stored::Stream(entries) => Reply::Array(
                entries
                    .iter()
                    .map(|((ms, seq), fields)| {
                        let fields = fields
                            .iter()
                            .flat_map(|(f, v)| [Reply::Bulk(f.clone()), Reply::Bulk(v.clone())])
                            .collect();
                        Reply::Array(vec![
                            Reply::Bulk(format!("{ms}-{seq}").into_bytes()),
                            Reply::Array(fields),
                        ])
                    })
                    .collect(),
            ),
        };
        dump.insert(key, (entry.value.type_name().to_owned(), ttl, value));
    }
    dump
}

fn words(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|item| item.as_bytes().to_vec()).collect()
}

fn same_keyspace(
    real: &BTreeMap<String, (String, i64, Reply)>,
    model: &BTreeMap<String, (String, i64, Reply)>,
) -> bool {
    real.len() == model.len()
        && real
            .iter()
            .zip(model)
            .all(|((rk, (rt, rttl, rv)), (mk, (mt, mttl, mv)))| {
                rk == mk && rt == mt && same_ttl(*rttl, *mttl) && same_reply(rv, mv)
            })
}

/// A call as words, for a failure's message.
fn described(name: &str, keys: &[Vec<u8>], args: &[Vec<u8>]) -> String {
    let words: Vec<_> = keys
        .iter()
        .chain(args)
        .map(|word| String::from_utf8_lossy(word))
        .collect();
    format!("{name} {}", words.join(" "))
}

fn server_time_ms(connection: &mut redis::Connection) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(connection).expect("TIME");
    seconds * 1000 + micros / 1000
}

/// Runs `step` on the real server (by `connection`) and on the `model`, at `now`: what it
/// was, and the two replies.
fn on_both(
    connection: &mut redis::Connection,
    model: &mut Keyspace,
    step: Step,
    now: u64,
) -> (String, Reply, Reply) {
    let (what, command) = match step {
        Step::Script { name, keys, args } => {
            return script_on_both(connection, model, name, &keys, &args)
        }
        Step::Expire(key) => (format!("expire {key}"), vec!["DEL".into(), key]),
        Step::Expired(id) => {
            let at = (now - 5000).to_string();
            let command = vec!["ZADD".into(), PERMITS_OUT.into(), at, id.clone()];
            (format!("an expired permit {id}"), command)
        }
        Step::Plant(key) => {
            let command = vec!["SET".into(), key.clone(), "planted".into()];
            (format!("plant {key}"), command)
        }
    };
    let real = from_redis(redis::cmd(&command[0]).arg(&command[1..]).query(connection));
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    (what, real, model.call(&words(&command)))
}

/// Runs the script `name` with `keys` and `args` on the real server and on the `model`.
fn script_on_both(
    connection: &mut redis::Connection,
    model: &mut Keyspace,
    name: &str,
    keys: &[String],
    args: &[String],
) -> (String, Reply, Reply) {
    let source = scripts::source(name);
    let real = from_redis(
        redis::cmd("EVAL")
            .arg(source)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query(connection),
    );
    let keys: Vec<Vec<u8>> = keys.iter().map(|key| key.as_bytes().to_vec()).collect();
    let args: Vec<Vec<u8>> = args.iter().map(|arg| arg.as_bytes().to_vec()).collect();
    let modelled = lua::eval(model, source, &keys, &args);
    (described(name, &keys, &args), real, modelled)
}

/// How long an answer (or a publication) may take.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The channel each step's end is marked on, for the subscriber.
const STEP_END: &str = "differential:step-end";

/// What the real server published in the step just run, as its subscriber to every channel
/// received it: the messages before the mark `connection` publishes now.
fn published_by_real(
    connection: &mut redis::Connection,
    subscriber: &mut redis::PubSub<'_>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    redis::cmd("PUBLISH")
        .arg(STEP_END)
        .arg("")
        .query::<i64>(connection)
        .expect("PUBLISH");
    let mut published = Vec::new();
    loop {
        let message = subscriber.get_message().expect("a publication");
        if message.get_channel_name() == STEP_END {
            return published;
        }
        let channel: Vec<u8> = message.get_channel().expect("a channel");
        published.push((channel, message.get_payload_bytes().to_vec()));
    }
}

/// Publications alike: the same channels in the same order, messages equal or times close
/// enough.
fn same_publications(real: &[(Vec<u8>, Vec<u8>)], model: &[(Vec<u8>, Vec<u8>)]) -> bool {
    real.len() == model.len()
        && real
            .iter()
            .zip(model)
            .all(|((rc, rm), (mc, mm))| rc == mc && same_bytes(rm, mm))
}

/// Runs one seed: `steps` steps on both servers, from empty keyspaces.
fn run(
    connection: &mut redis::Connection,
    subscriber: &mut redis::PubSub<'_>,
    seed: u64,
    steps: usize,
) {
    redis::cmd("FLUSHALL")
        .query::<()>(connection)
        .expect("FLUSHALL");
    let mut random = Random(seed.max(1));
    let mut model = Keyspace::at(server_time_ms(connection));
    for step in 0..steps {
        let now = server_time_ms(connection);
        model.advance_to(now);
        let step_made = random_step(&mut random, now);
        let (what, real, modelled) = on_both(connection, &mut model, step_made, now);
        assert!(
            same_reply(&real, &modelled),
            "seed {seed}, step {step} ({what}): the server answered {real:?}, the model {modelled:?}"
        );
        let (real_sent, model_sent) = (
            published_by_real(connection, subscriber),
            std::mem::take(&mut model.published),
        );
        assert!(
            same_publications(&real_sent, &model_sent),
            "seed {seed}, step {step} ({what}): the server published {:?}, the model {:?}",
            texts(&real_sent),
            texts(&model_sent),
        );
        let (real_keys, model_keys) = (dump_real(connection), dump_model(&mut model));
        assert!(
            same_keyspace(&real_keys, &model_keys),
            "seed {seed}, step {step} ({what}): the keyspaces differ:\nserver {real_keys:#?}\nmodel {model_keys:#?}"
        );
    }
}

#[test]
fn the_models_server_answers_and_stores_what_redis_does() {
    let server = RedisServer::start().expect("a throwaway redis-server");
    let client = redis::Client::open(server.url()).expect("client");
    let mut connection = client.get_connection().expect("connection");
    connection
        .set_read_timeout(Some(TIMEOUT))
        .expect("a timeout");
    let steps = std::env::var("REDLEASE_DIFFERENTIAL_STEPS")
        .ok()
        .and_then(|steps| steps.parse().ok())
        .unwrap_or(STEPS);
    let seeds: Vec<u64> = match std::env::var("REDLEASE_DIFFERENTIAL_SEED") {
        Ok(seed) => vec![seed.parse().expect("a seed")],
        Err(_) => (1..=RUNS)
            .map(|run| run.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect(),
    };
    let mut subscriber = client.get_connection().expect("connection");
    subscriber
        .set_read_timeout(Some(TIMEOUT))
        .expect("a timeout");
    let mut subscriber = subscriber.as_pubsub();
    subscriber.psubscribe("*").expect("PSUBSCRIBE");
    for seed in seeds {
        run(&mut connection, &mut subscriber, seed, steps);
    }
    println!("{} steps compared", steps as u64 * RUNS);
}
