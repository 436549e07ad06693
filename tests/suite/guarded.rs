//! Guarded writes: a holder's writes to its own keys go through only while its hold is
//! current, checked by Redis in the same script. After a break-lock, after the lease ran
//! out, and after another holder took the lock, nothing is written (seen in the keys); an
//! answer lost on the way applies the writes once; bad input is refused before anything is
//! sent.

use crate::common;

use std::time::Duration;

use common::{eventually, manager, server, RedisServer};
use redis::Value;
use redlease::{Error, GuardedScript, LockManager, LostReason, Writes};
use redlease_testing::CuttingProxy;

const PATIENCE: Duration = Duration::from_secs(10);

/// The raw reply to `GET key`.
fn get(redis: &RedisServer, key: &str) -> String {
    redis.command(&["GET", key]).unwrap()
}

fn status(value: &str) -> Writes {
    let mut writes = Writes::new();
    writes.set("{job}:status", value);
    writes
}

fn assert_lock_lost(outcome: redlease::Result<Vec<Value>>) {
    match outcome {
        Err(Error::LockLost { name, .. }) => assert_eq!(name, "job"),
        other => panic!("a write without the hold went through: {other:?}"),
    }
}

#[test]
fn writes_apply_in_order_while_the_hold_is_current() {
    let redis = server();
    // Request keys are deleted with the watchdog's next renewal batch: one a second here.
    let manager = manager(&redis, Duration::from_secs(3));
    let guard = manager.lock("job").lock().unwrap();
    let answers = guard
        .guarded_write(
            Writes::new()
                .set("{job}:status", "running")
                .hash_set("{job}:progress", "rows", "10")
                .increment_by("{job}:attempts", 2)
                .increment_by("{job}:attempts", 3)
                .set_with_ttl("{job}:heartbeat", "1", Duration::from_secs(60))
                .delete("{job}:scratch"),
        )
        .unwrap();
    assert_eq!(
        answers,
        [
            Value::Okay,
            Value::Int(1),
            Value::Int(2),
            Value::Int(5),
            Value::Okay,
            Value::Int(0)
        ]
    );
    assert_eq!(get(&redis, "{job}:status"), "$7\r\nrunning\r\n");
    assert_eq!(
        redis.command(&["HGET", "{job}:progress", "rows"]).unwrap(),
        "$2\r\n10\r\n"
    );
    let ttl = redis.command(&["PTTL", "{job}:heartbeat"]).unwrap();
    assert!(ttl.starts_with(':') && ttl != ":-1\r\n", "{ttl:?}");
    // No request key is left behind once the answer arrived.
    assert!(eventually(PATIENCE, || {
        let keys = redis.command(&["KEYS", "*redlease_request*"]).unwrap();
        keys == "*0\r\n"
    }));
}

#[test]
fn nothing_is_written_after_a_break_lock() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let other = common::manager(&redis, Duration::from_secs(30));
    let guard = manager.lock("job").lock().unwrap();
    guard.guarded_write(&status("running")).unwrap();
    assert!(other.lock("job").break_lock().unwrap());
    assert_lock_lost(guard.guarded_write(&status("done")));
    assert_eq!(get(&redis, "{job}:status"), "$7\r\nrunning\r\n");
    assert!(guard.is_lost());
}

#[test]
fn nothing_is_written_once_redis_let_the_lease_run_out() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let guard = manager.lock("job").lock().unwrap();
    // Redis expires the key while this process still counts the lease as running: only the
    // script's own check can refuse the write.
    assert_eq!(redis.command(&["PEXPIRE", "job", "1"]).unwrap(), ":1\r\n");
    assert!(eventually(PATIENCE, || {
        redis.command(&["EXISTS", "job"]).unwrap() == ":0\r\n"
    }));
    assert!(!guard.is_lost(), "not known here yet");
    assert_lock_lost(guard.guarded_write(&status("done")));
    assert_eq!(get(&redis, "{job}:status"), "$-1\r\n");
    assert!(guard.is_lost(), "the refusal tells the guard");

    // A fixed lease that ran out by the local clock is refused here, before anything is sent.
    let fixed = manager
        .lock("job")
        .leased_for(Duration::from_millis(50))
        .lock()
        .unwrap();
    assert!(eventually(PATIENCE, || fixed.is_lost()));
    match fixed.guarded_write(&status("late")) {
        Err(Error::LockLost { reason, .. }) => assert_eq!(reason, LostReason::LeaseExpired),
        other => panic!("{other:?}"),
    }
    assert_eq!(get(&redis, "{job}:status"), "$-1\r\n");
}

#[test]
fn nothing_is_written_after_another_holder_took_the_lock() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let other = common::manager(&redis, Duration::from_secs(30));
    let guard = manager.lock("job").lock().unwrap();
    // Redis loses the key (a failover to a replica without it), and another holder takes the
    // lock before this process hears of it.
    assert_eq!(redis.command(&["DEL", "job"]).unwrap(), ":1\r\n");
    let second = other.lock("job").try_lock().unwrap().expect("free");
    second.guarded_write(&status("second")).unwrap();
    assert_lock_lost(guard.guarded_write(&status("first")));
    let append = GuardedScript::new("return redis.call('set', KEYS[1], ARGV[1])");
    match guard.run_guarded(&append, &["{job}:status"], &["first"]) {
        Err(Error::LockLost { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(get(&redis, "{job}:status"), "$6\r\nsecond\r\n");
}

#[test]
fn a_guarded_write_whose_answer_is_lost_applies_once() {
    let redis = server();
    let proxy = CuttingProxy::start(redis.port()).unwrap();
    let manager = LockManager::builder(proxy.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .outage_grace(Duration::from_secs(10))
        .build()
        .unwrap();
    let guard = manager.lock("job").lock().unwrap();
    let mut increment = Writes::new();
    increment.increment_by("{job}:count", 1);
    guard.guarded_write(&increment).unwrap(); // loads the script
    proxy.cut_next(&["EVALSHA", "{job}:count"]);
    let answers = guard.guarded_write(&increment).unwrap();
    assert_eq!(proxy.cuts(), 1, "the answer was cut");
    assert_eq!(answers, [Value::Int(2)], "the first run's answer");
    assert_eq!(get(&redis, "{job}:count"), "$1\r\n2\r\n", "applied once");

    // A write Redis refuses ends the script; the ones before it stand, once, even when the
    // answer of the refusal is lost and the request sent again.
    let mut partly = Writes::new();
    partly
        .increment_by("{job}:count", 1)
        .set("{job}:text", "words")
        .increment_by("{job}:text", 1)
        .set("{job}:never", "x");
    proxy.cut_next(&["EVALSHA", "{job}:text"]);
    match guard.guarded_write(&partly) {
        Err(Error::GuardedWriteFailed {
            name,
            applied,
            message,
        }) => {
            assert_eq!((name.as_str(), applied), ("job", 2));
            assert!(message.contains("not an integer"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(proxy.cuts(), 2, "the refusal's answer was cut");
    assert_eq!(get(&redis, "{job}:count"), "$1\r\n3\r\n", "applied once");
    assert_eq!(get(&redis, "{job}:never"), "$-1\r\n");
    assert!(!guard.is_lost(), "a refused write says nothing of the hold");
}

#[test]
fn a_callers_script_sees_its_own_keys_and_arguments() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let capped = GuardedScript::new(
        "redis.call('rpush', KEYS[1], ARGV[1])
         redis.call('ltrim', KEYS[1], -tonumber(ARGV[2]), -1)
         return {#KEYS, #ARGV, redis.call('llen', KEYS[1])}",
    );
    let guard = manager.lock("job").lock().unwrap();
    for entry in ["a", "b", "c"] {
        guard
            .run_guarded(&capped, &["{job}:log"], &[entry, "2"])
            .unwrap();
    }
    let answer = guard
        .run_guarded(&capped, &["{job}:log"], &["d", "2"])
        .unwrap();
    assert_eq!(
        answer,
        Value::Array(vec![Value::Int(1), Value::Int(2), Value::Int(2)])
    );
    assert_eq!(
        redis.command(&["LRANGE", "{job}:log", "0", "-1"]).unwrap(),
        "*2\r\n$1\r\nc\r\n$1\r\nd\r\n"
    );
    let broken = GuardedScript::new("return redis.call('no-such-command')");
    match guard.run_guarded(&broken, &["{job}:log"], &[""; 0]) {
        Err(Error::GuardedWriteFailed { message, .. }) => {
            assert!(message.to_lowercase().contains("unknown"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!guard.is_lost(), "a failing body says nothing of the hold");
}

#[test]
fn read_and_write_guards_of_a_read_write_lock_guard_their_writes() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let rwlock = manager.read_write_lock("job");
    let writer = rwlock.write().lock().unwrap();
    writer.guarded_write(&status("written")).unwrap();
    writer.unlock().unwrap();
    let reader = rwlock.read().lock().unwrap();
    reader.guarded_write(&status("read")).unwrap();
    assert_eq!(get(&redis, "{job}:status"), "$4\r\nread\r\n");
    assert!(rwlock.read().break_lock().unwrap());
    assert_lock_lost(reader.guarded_write(&status("late")));
    assert_eq!(get(&redis, "{job}:status"), "$4\r\nread\r\n");
}

#[test]
fn bad_writes_are_refused_before_anything_is_sent() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let guard = manager.lock("job").lock().unwrap();
    let empty_key = Writes::new().set("", "x").clone();
    let zero_ttl = Writes::new()
        .set_with_ttl("{job}:x", "x", Duration::ZERO)
        .clone();
    for writes in [Writes::new(), empty_key, zero_ttl] {
        match guard.guarded_write(&writes) {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("guarded"), "{why}"),
            other => panic!("{writes:?}: {other:?}"),
        }
    }
    let script = GuardedScript::new("return 1");
    assert!(matches!(
        guard.run_guarded(&script, &[""], &[""; 0]),
        Err(Error::InvalidArgument(_))
    ));
    for pattern in ["{job}:*", "*redlease_request*"] {
        let written = redis.command(&["KEYS", pattern]).unwrap();
        assert_eq!(written, "*0\r\n", "nothing written, no request key");
    }
}
