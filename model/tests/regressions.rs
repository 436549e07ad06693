//! Defects the model's search found, each as the shortest sequence of the crate's scripts
//! that shows it, run on a throwaway `redis-server` (or the server `REDLEASE_REDIS_SERVER`
//! names).

use redis::Value;
use redlease_model::scripts;
use redlease_testing::RedisServer;

fn connect(server: &RedisServer) -> redis::Connection {
    let client = redis::Client::open(server.url()).expect("client");
    let connection = client.get_connection().expect("connection");
    let timeout = Some(std::time::Duration::from_secs(10));
    connection.set_read_timeout(timeout).expect("a timeout");
    connection
}

fn eval(connection: &mut redis::Connection, name: &str, keys: &[&str], args: &[&str]) -> Value {
    redis::cmd("EVAL")
        .arg(scripts::source(name))
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query(connection)
        .unwrap_or_else(|err| panic!("{name}: {err}"))
}

/// The read-write lock's hash and fencing token counter.
const KEYS: [&str; 2] = ["rw", "{rw}:token"];
/// A deadline no step reaches.
const DEADLINE: &str = "99999999999999";

/// A throwaway server with the upgradable read taken by the chain `h`.
fn upgradable_read_taken() -> (RedisServer, redis::Connection) {
    let server = RedisServer::start().expect("a throwaway redis-server");
    let mut connection = connect(&server);
    let prefix = "{rw}:h:rwlock_timeout";
    let args = ["30000", "h", "0", prefix, "{rw}:", "", DEADLINE];
    let taken = eval(&mut connection, "rwlock::UPGRADABLE_ACQUIRE", &KEYS, &args);
    assert_eq!(taken, Value::Array(vec![Value::Int(1), Value::Int(1)]));
    (server, connection)
}

/// The upgrade try `try_id` of the chain `h`: its answer.
fn upgrade(connection: &mut redis::Connection, try_id: &str) -> Value {
    let args = ["30000", "h:write", "0", "h", "{rw}:", try_id, DEADLINE];
    eval(connection, "rwlock::WRITE_ACQUIRE", &KEYS, &args)
}

/// The write levels of the chain `h`, and the lock's mode.
fn writing(connection: &mut redis::Connection) -> (Option<String>, Option<String>) {
    let mut field = |field: &str| -> Option<String> {
        let query = redis::cmd("HGET").arg("rw").arg(field).query(connection);
        query.expect("HGET")
    };
    (field("h:write"), field("mode"))
}

/// Found in the upgradable read's search: an upgrade try whose answer did not come is undone
/// (its undo queued behind it on its connection), and the next try, on another connection,
/// takes the write lock and is answered. The first try, held up, then runs: it found its
/// chain writing and took the grant over under its own id, so that its undo, right behind
/// it, took back the write lock the second try's answer had handed out. A reader could then
/// get in beside the writer. (It also set the chain's levels back to one.) A late copy of an
/// earlier try now changes nothing: the grant stays with the later try that holds it (try
/// ids are numbered in the order their client makes them).
#[test]
fn a_late_copy_of_an_earlier_upgrade_try_leaves_the_later_grant_alone() {
    // Request numbers of one length, and of two (compared by length first).
    late_copy_of_an_earlier_upgrade_try("client:2", "client:4");
    late_copy_of_an_earlier_upgrade_try("client:9", "client:10");
}

/// The upgrade try `first` times out and `second` takes the write lock; `first` then runs,
/// and its undo after it.
fn late_copy_of_an_earlier_upgrade_try(first: &str, second: &str) {
    let (_server, mut connection) = upgradable_read_taken();
    // The second try is answered: the chain writes, and enters the write lock once more.
    let granted = upgrade(&mut connection, second);
    assert_eq!(granted, Value::Array(vec![Value::Int(1), Value::Int(2)]));
    let again = ["30000", "h:write", "1", "h", "{rw}:", "", DEADLINE];
    let entered = eval(&mut connection, "rwlock::WRITE_ACQUIRE", &KEYS, &again);
    assert_eq!(entered, Value::Array(vec![Value::Int(2), Value::Int(2)]));
    // The first comes late, then its undo, whose copies can come no more.
    upgrade(&mut connection, first);
    let undo_args = ["h:write", "0", "", "1", first, "0"];
    let undo_keys = ["rw", "redisson_rwlock:{rw}"];
    eval(&mut connection, "rwlock::UNDO", &undo_keys, &undo_args);
    // The late copy changed nothing: the chain writes, with its two levels.
    let (levels, mode) = writing(&mut connection);
    assert_eq!(
        levels.as_deref(),
        Some("2"),
        "{first} then {second}: the write lock {second} holds, and its levels"
    );
    assert_eq!(mode.as_deref(), Some("write"));
}

/// Found in the upgradable read's search once its reader could upgrade again: the first
/// upgrade's write lock is released, and the release's answer does not come (the release is
/// held up). The reader upgrades again: its try finds the chain still writing, and takes the
/// write lock over. The first release then runs, and freed the second upgrade's write lock:
/// it named the chain's field, not the grant. A reader could then get in beside the writer.
/// An upgrade's release now names the try whose grant it releases, and frees nothing once a
/// later try holds the lock; the later try's grant has a fencing token of its own.
#[test]
fn a_late_release_of_an_upgrade_leaves_the_next_upgrade_alone() {
    let (_server, mut connection) = upgradable_read_taken();
    let first = upgrade(&mut connection, "client:2");
    assert_eq!(first, Value::Array(vec![Value::Int(1), Value::Int(2)]));
    // The first upgrade's release is held up; the reader upgrades again meanwhile.
    let second = upgrade(&mut connection, "client:5");
    let release_keys = [
        "rw",
        "redisson_rwlock:{rw}",
        "{rw}:release:c:4",
        "{rw}:token",
    ];
    let release_args = [
        "h:write", "30000", DEADLINE, "1", "0", "{rw}:", "", "0", "client:2", DEADLINE,
    ];
    let release = "rwlock::WRITE_RELEASE";
    eval(&mut connection, release, &release_keys, &release_args);
    assert_eq!(
        writing(&mut connection),
        (Some("1".to_owned()), Some("write".to_owned())),
        "the write lock the second upgrade holds, after the first one's late release"
    );
    assert_eq!(
        second,
        Value::Array(vec![Value::Int(1), Value::Int(3)]),
        "the second upgrade's grant, with a fencing token above the first's"
    );
}
