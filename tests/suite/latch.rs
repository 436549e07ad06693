//! The count-down latch on a real server: waiters in several processes all wake when the
//! count reaches zero, woken by the message and not by polling; counting down from many
//! threads and processes opens the latch exactly once; the Redis layout is the documented
//! one, seen from a hand-written client both ways; bad input and keys of another type get
//! typed errors; nothing is left behind.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    child_role, env, eventually, line_with, manager, manager_for_url, run_children, server,
    spawn_child, wait_for_line, RedisServer, CHILD_DEADLINE,
};
use crossbeam_channel::Receiver;
use redis::Commands;
use redlease::{CountDownLatch, Error};

/// A watchdog timeout whose third, the waiters' fallback look at the count, is far longer
/// than any bound below: a waiter woken within one was woken by a message.
const LONG_WATCHDOG: Duration = Duration::from_secs(60);

/// How soon every waiter must be awake after the latch opens.
const WAKE_BOUND: Duration = Duration::from_secs(2);

/// How long the tests give a "no hang" condition.
const PATIENCE: Duration = Duration::from_secs(10);

/// The channel of the latch `name`, as the protocol documents it.
fn documented_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// How many connections the server has subscribed to `channel`.
fn subscribers(redis: &RedisServer, channel: &str) -> usize {
    let reply = redis.command(&["PUBSUB", "NUMSUB", channel]).unwrap();
    // `*2 $len channel :count`: the count is the last line.
    let count = reply.trim_end().rsplit("\r\n").next().unwrap();
    count.trim_start_matches(':').parse().unwrap()
}

/// Asserts that no latch channel is subscribed by `manager` or on the server.
fn assert_no_subscription_left(manager: &redlease::LockManager, redis: &RedisServer) {
    assert!(
        eventually(PATIENCE, || manager.subscribed_channels() == 0),
        "a subscription was left: {}",
        manager.subscribed_channels()
    );
    let latch_channels = || {
        redis
            .command(&["PUBSUB", "CHANNELS", "redisson_countdownlatch*"])
            .unwrap()
    };
    assert!(
        eventually(PATIENCE, || latch_channels().starts_with("*0")),
        "a latch channel is still subscribed: {}",
        latch_channels()
    );
}

/// A raw subscription to `channel`, on a connection of its own: a thread forwards every
/// message (channel, payload) until the receiver is dropped. Answers once Redis confirmed it.
fn raw_subscriber(redis: &RedisServer, channel: &str) -> Receiver<(String, String)> {
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let (forward, messages) = crossbeam_channel::unbounded();
    let (subscribed, confirmed) = crossbeam_channel::bounded(1);
    let channel = channel.to_owned();
    std::thread::spawn(move || {
        let mut pubsub = connection.as_pubsub();
        pubsub.subscribe(&channel).unwrap();
        // Short reads, so the thread notices soon that nobody listens anymore.
        pubsub
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        subscribed.send(()).unwrap();
        loop {
            let message = match pubsub.get_message() {
                Ok(message) => message,
                Err(err) if err.is_timeout() => {
                    if forward.send(("".into(), "".into())).is_err() {
                        return;
                    }
                    continue;
                }
                // The server is gone: the test is over.
                Err(_) => return,
            };
            let payload = (
                message.get_channel_name().to_owned(),
                message.get_payload().unwrap(),
            );
            if forward.send(payload).is_err() {
                return;
            }
        }
    });
    confirmed.recv_timeout(PATIENCE).expect("subscribed");
    messages
}

/// The next message of a [`raw_subscriber`].
fn next_message(subscriber: &Receiver<(String, String)>) -> (String, String) {
    loop {
        let message = subscriber
            .recv_timeout(PATIENCE)
            .expect("a message within the patience");
        // Empty: the forwarding thread checking that someone still listens.
        if !message.0.is_empty() {
            return message;
        }
    }
}

#[test]
fn waiters_in_three_processes_all_wake_when_the_last_count_down_lands() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let name = "release:{eu}:7";
    let latch = manager.count_down_latch(name);
    assert!(latch.try_set_count(2).unwrap());

    let mut children: Vec<_> = (0..3)
        .map(|_| {
            spawn_child(
                "latch::latch_waiter_process",
                "latch_waiter",
                &[
                    ("REDLEASE_TEST_URL", redis.url()),
                    ("REDLEASE_TEST_LATCH", name.to_owned()),
                ],
            )
        })
        .collect();
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|child| wait_for_line(child, "READY"))
        .collect();
    // Every child is subscribed, so each one is asleep in its wait (or about to look again).
    assert!(
        eventually(PATIENCE, || subscribers(&redis, &documented_channel(name))
            == 3),
        "three waiting processes subscribed"
    );

    latch.count_down().unwrap();
    assert_eq!(latch.count().unwrap(), 1);
    let opened_at = Instant::now();
    latch.count_down().unwrap();
    let mut slowest = Duration::ZERO;
    for output in &mut outputs {
        assert_eq!(line_with(output, "WOKEN"), "open");
        slowest = opened_at.elapsed();
    }
    eprintln!("three processes woken within {slowest:?} of the last count-down");
    assert!(
        slowest < WAKE_BOUND,
        "all waiters woke within {WAKE_BOUND:?}: {slowest:?}"
    );
    for (child, output) in children.iter_mut().zip(&mut outputs) {
        assert_eq!(line_with(output, "LEFT"), "0 channels");
        assert!(child.wait_within(CHILD_DEADLINE).success());
    }
    assert_no_subscription_left(&manager, &redis);
}

/// Child side of the test above: waits for the latch and says when it opened.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn latch_waiter_process() {
    if child_role().as_deref() != Some("latch_waiter") {
        return;
    }
    let manager = manager_for_url(&env("REDLEASE_TEST_URL"), LONG_WATCHDOG);
    let latch = manager.count_down_latch(&env("REDLEASE_TEST_LATCH"));
    println!("READY");
    let open = latch.wait_for(CHILD_DEADLINE).unwrap();
    println!("WOKEN {}", if open { "open" } else { "timed out" });
    assert!(eventually(PATIENCE, || manager.subscribed_channels() == 0));
    println!("LEFT {} channels", manager.subscribed_channels());
}

const COUNTING_PROCESSES: usize = 3;
const COUNTING_THREADS: usize = 4;
const COUNT_DOWNS_PER_THREAD: usize = 25;

#[test]
fn counting_down_from_threads_in_several_processes_opens_the_latch_exactly_once() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let name = "counted";
    let subscriber = raw_subscriber(&redis, &documented_channel(name));
    let latch = manager.count_down_latch(name);
    // Fewer than the count-downs to come: the surplus must neither open it again nor leave a
    // negative count behind.
    let count = COUNTING_PROCESSES * COUNTING_THREADS * COUNT_DOWNS_PER_THREAD * 3 / 4;
    assert!(latch.try_set_count(count as u64).unwrap());
    assert_eq!(next_message(&subscriber).1, "1");

    let waiter = std::thread::spawn({
        let latch = latch.clone();
        move || latch.wait_for(CHILD_DEADLINE)
    });
    run_children(
        COUNTING_PROCESSES,
        "latch::counting_process",
        "count_down",
        &[
            ("REDLEASE_TEST_URL", redis.url()),
            ("REDLEASE_TEST_LATCH", name.to_owned()),
        ],
    );
    assert!(waiter.join().unwrap().unwrap(), "the waiter saw it open");
    assert_eq!(latch.count().unwrap(), 0);
    assert!(redis.command(&["EXISTS", name]).unwrap().starts_with(":0"));

    assert_eq!(next_message(&subscriber).1, "0");
    // A sentinel published after everything: the next message must be it, not a second `0`.
    let _: () = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap()
        .publish(documented_channel(name), "end")
        .unwrap();
    assert_eq!(next_message(&subscriber).1, "end");
    drop(subscriber);
    assert_no_subscription_left(&manager, &redis);
}

/// Child side of the test above: threads that count the latch down.
#[test]
#[ignore = "a child process of the test above, which runs it"]
fn counting_process() {
    if child_role().as_deref() != Some("count_down") {
        return;
    }
    let manager = manager_for_url(&env("REDLEASE_TEST_URL"), LONG_WATCHDOG);
    let latch = manager.count_down_latch(&env("REDLEASE_TEST_LATCH"));
    let threads: Vec<_> = (0..COUNTING_THREADS)
        .map(|_| {
            let latch = latch.clone();
            std::thread::spawn(move || {
                for _ in 0..COUNT_DOWNS_PER_THREAD {
                    latch.count_down().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn a_waiter_is_woken_by_the_message_from_another_manager_not_by_polling() {
    let redis = server();
    let waiting = manager(&redis, LONG_WATCHDOG);
    let counting = manager(&redis, LONG_WATCHDOG);
    let name = "prompt";
    assert!(counting.count_down_latch(name).try_set_count(1).unwrap());

    let (done, finished) = crossbeam_channel::bounded(1);
    let waiter = std::thread::spawn({
        let latch = waiting.count_down_latch(name);
        move || {
            let result = latch.wait();
            done.send(Instant::now()).unwrap();
            result
        }
    });
    assert!(eventually(PATIENCE, || subscribers(
        &redis,
        &documented_channel(name)
    ) == 1));
    let counted_at = Instant::now();
    counting.count_down_latch(name).count_down().unwrap();
    let woken_at = finished
        .recv_timeout(PATIENCE)
        .expect("the waiter returns once the latch opens");
    waiter.join().unwrap().unwrap();
    let woken_after = woken_at - counted_at;
    eprintln!("woken {woken_after:?} after the count-down");
    assert!(
        woken_after < WAKE_BOUND,
        "woken by the message, well before the {:?} fallback look: {woken_after:?}",
        LONG_WATCHDOG / 3
    );
    assert_no_subscription_left(&waiting, &redis);
}

#[test]
fn a_wait_that_runs_out_answers_false_and_leaves_no_subscription() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let latch = manager.count_down_latch("stays-closed");
    assert!(latch.try_set_count(3).unwrap());
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    assert!(!latch.wait_for(wait).unwrap());
    let waited = started.elapsed();
    assert!(
        waited >= wait && waited < wait + WAKE_BOUND,
        "ran out on time: {waited:?}"
    );
    assert!(!latch.wait_for(Duration::ZERO).unwrap());
    assert!(!latch
        .wait_until(Instant::now() + Duration::from_millis(20))
        .unwrap());
    assert_eq!(latch.count().unwrap(), 3);
    assert_no_subscription_left(&manager, &redis);
}

#[test]
fn a_hand_written_client_following_the_layout_opens_the_latch_and_wakes_its_waiters() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let name = "{eu}:import";
    let mut raw = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    // The count is a string under the name; setting one announces `1`.
    let _: () = raw.set(name, 2).unwrap();
    let _: () = raw.publish(documented_channel(name), "1").unwrap();
    let latch = manager.count_down_latch(name);
    assert_eq!(latch.count().unwrap(), 2);
    assert!(!latch.try_set_count(5).unwrap(), "the latch has a count");

    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let latch = latch.clone();
            std::thread::spawn(move || {
                let open = latch.wait_for(PATIENCE);
                (open, Instant::now())
            })
        })
        .collect();
    assert!(eventually(PATIENCE, || subscribers(
        &redis,
        &documented_channel(name)
    ) == 1));
    // Redisson's count-down: DECR; at zero or below DEL; at exactly zero PUBLISH `0`.
    let count_down = redis::Script::new(
        "local left = redis.call('decr', KEYS[1])
         if left <= 0 then redis.call('del', KEYS[1]) end
         if left == 0 then redis.call('publish', KEYS[2], '0') end
         return left",
    );
    let channel = documented_channel(name);
    let left: i64 = count_down.key(name).key(&channel).invoke(&mut raw).unwrap();
    assert_eq!(left, 1);
    let opened_at = Instant::now();
    let left: i64 = count_down.key(name).key(&channel).invoke(&mut raw).unwrap();
    assert_eq!(left, 0);
    for waiter in waiters {
        let (open, woken_at) = waiter.join().unwrap();
        assert!(open.unwrap());
        assert!(
            woken_at - opened_at < WAKE_BOUND,
            "woken by the hand-written publish: {:?}",
            woken_at - opened_at
        );
    }
    assert_no_subscription_left(&manager, &redis);
}

#[test]
fn the_library_s_messages_reach_a_raw_subscriber_on_the_documented_channel() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let name = "{eu}:export";
    let channel = documented_channel(name);
    assert_eq!(channel, "redisson_countdownlatch__channel__{{eu}:export}");
    let subscriber = raw_subscriber(&redis, &channel);
    let latch = manager.count_down_latch(name);

    assert!(latch.try_set_count(2).unwrap());
    assert_eq!(next_message(&subscriber), (channel.clone(), "1".into()));
    assert!(redis
        .command(&["GET", name])
        .unwrap()
        .ends_with("\r\n2\r\n"));
    latch.count_down().unwrap();
    latch.count_down().unwrap();
    assert_eq!(next_message(&subscriber), (channel.clone(), "0".into()));
    assert!(redis.command(&["EXISTS", name]).unwrap().starts_with(":0"));

    // A count-down of an open latch announces nothing; a delete announces `1`, as Redisson.
    latch.count_down().unwrap();
    assert!(latch.try_set_count(1).unwrap());
    assert_eq!(next_message(&subscriber), (channel.clone(), "1".into()));
    assert!(latch.delete().unwrap());
    assert_eq!(next_message(&subscriber), (channel.clone(), "1".into()));
    assert!(!latch.delete().unwrap());
    assert!(redis.command(&["EXISTS", name]).unwrap().starts_with(":0"));
}

#[test]
fn an_open_latch_takes_a_new_count_and_a_delete_opens_it_for_waiters() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let latch = manager.count_down_latch("reusable");
    assert_eq!(latch.count().unwrap(), 0);
    assert!(
        latch.wait_for(Duration::ZERO).unwrap(),
        "open without a count"
    );
    latch.count_down().unwrap();
    assert_eq!(latch.count().unwrap(), 0, "no negative count is left");

    assert!(latch.try_set_count(1).unwrap());
    latch.count_down().unwrap();
    assert!(latch.try_set_count(4).unwrap(), "open again: a new count");
    assert!(!latch.wait_for(Duration::ZERO).unwrap(), "closed by it");

    let waiter = std::thread::spawn({
        let latch = latch.clone();
        move || latch.wait_for(PATIENCE)
    });
    assert!(eventually(PATIENCE, || manager.subscribed_channels() == 1));
    assert!(latch.delete().unwrap());
    assert!(waiter.join().unwrap().unwrap());
    assert_no_subscription_left(&manager, &redis);
}

#[test]
fn a_key_of_another_type_is_a_typed_error_and_stays_as_it_was() {
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let mut raw = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = raw.hset("a-hash", "field", "value").unwrap();
    let _: () = raw.set("a-word", "hello").unwrap();
    for name in ["a-hash", "a-word"] {
        let latch = manager.count_down_latch(name);
        let is_wrong_type = |result: Result<(), Error>| matches!(result, Err(Error::WrongType { name: ref named }) if named == name);
        assert!(is_wrong_type(latch.try_set_count(1).map(drop)), "{name}");
        assert!(is_wrong_type(latch.count_down()), "{name}");
        assert!(is_wrong_type(latch.count().map(drop)), "{name}");
        assert!(is_wrong_type(latch.delete().map(drop)), "{name}");
        assert!(is_wrong_type(latch.wait_for(PATIENCE).map(drop)), "{name}");
        assert!(is_wrong_type(latch.wait()), "{name}");
    }
    let hash: Vec<(String, String)> = raw.hgetall("a-hash").unwrap();
    assert_eq!(hash, [("field".to_owned(), "value".to_owned())]);
    let word: String = raw.get("a-word").unwrap();
    assert_eq!(word, "hello");
    let error = manager.count_down_latch("a-hash").count().unwrap_err();
    assert_eq!(
        error.to_string(),
        "\"a-hash\" is taken by a redis key of another kind"
    );
    assert!(!error.is_transient());
    assert_no_subscription_left(&manager, &redis);
}

#[test]
fn bad_input_and_a_stopped_redis_get_typed_errors() {
    let mut redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let latch = manager.count_down_latch("bounded");
    assert!(matches!(
        latch.try_set_count(0),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        latch.try_set_count(u64::MAX),
        Err(Error::InvalidArgument(_))
    ));
    assert!(latch.try_set_count(i64::MAX as u64).unwrap());
    assert_eq!(latch.count().unwrap(), i64::MAX as u64);
    assert!(matches!(
        latch.wait_for(Duration::MAX),
        Err(Error::InvalidArgument(_))
    ));

    let unnamed = manager.count_down_latch("");
    assert!(matches!(
        unnamed.try_set_count(1),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        unnamed.count_down(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(unnamed.count(), Err(Error::InvalidArgument(_))));
    assert!(matches!(unnamed.delete(), Err(Error::InvalidArgument(_))));
    assert!(matches!(unnamed.wait(), Err(Error::InvalidArgument(_))));

    // A waiter while Redis goes away: an error, not a hang.
    let waiter = std::thread::spawn({
        let latch = latch.clone();
        move || latch.wait()
    });
    assert!(eventually(PATIENCE, || manager.subscribed_channels() == 1));
    redis.kill().unwrap();
    let started = Instant::now();
    let waited = waiter.join().unwrap();
    assert!(
        waited.as_ref().is_err_and(Error::is_transient),
        "{waited:?}"
    );
    for result in [
        latch.count_down(),
        latch.count().map(drop),
        latch.try_set_count(1).map(drop),
        latch.wait_for(Duration::from_secs(1)).map(drop),
    ] {
        assert!(
            result.as_ref().is_err_and(Error::is_transient),
            "{result:?}"
        );
    }
    assert!(started.elapsed() < PATIENCE, "{:?}", started.elapsed());

    manager.shutdown();
    assert!(matches!(latch.wait(), Err(Error::ShutDown)));
}

#[test]
fn handles_are_send_sync_and_clone() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<CountDownLatch>();
    let redis = server();
    let manager = manager(&redis, LONG_WATCHDOG);
    let latch = manager.count_down_latch("shared").clone();
    assert_eq!(latch.name(), "shared");
    assert_eq!(format!("{latch:?}"), "CountDownLatch { name: \"shared\" }");
}
