//! The hub against a scripted stand-in for Redis, for what a real server will not do on
//! demand: stop reading mid-command while its socket stays open, send corrupt frames, or
//! end a subscription at a chosen moment. And against a real server for the subscribed
//! connection's own login, which a manager's build never reaches with wrong credentials:
//! its command connections log in first, with the same ones.
//!
//! Cluster mode, against scripted nodes and a map the tests set, is in [`sharded`]; against
//! a real cluster of two nodes, in [`real_cluster`].

mod real_cluster;
mod sharded;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::transport::frame::{self, Frame};
use super::{Notices, PubSub, Subscription};
use crate::error::Error;

/// Answers `AUTH`, `SUBSCRIBE`, `UNSUBSCRIBE`, `SSUBSCRIBE`, `SUNSUBSCRIBE` and `PING` like
/// Redis in subscribed mode; can be told to stop reading once it has answered a given
/// command, to refuse the login or a subscription, to send bytes of its own before its next
/// answer, and to send raw bytes to the latest connection. Logs the commands it reads.
struct ScriptedRedis {
    port: u16,
    script: Arc<Script>,
}

/// What a scripted server does, shared by its connections.
#[derive(Default)]
struct Script {
    /// While set, no connection reads or answers: writes to it fill the socket buffers and
    /// stall. Checked before each command and each read, never while one is answered.
    frozen: AtomicBool,
    /// The command (its words joined by spaces) whose answer freezes the connection that
    /// answers it, before the answer is sent: so the freeze follows that answer at once,
    /// whether or not the connection was waiting in a read when it was asked for.
    freeze_after: Mutex<Option<String>>,
    /// While set, `AUTH` is answered with `WRONGPASS`.
    refuse_login: AtomicBool,
    connections: AtomicUsize,
    /// Connections that ended.
    closed: AtomicUsize,
    latest: Mutex<Option<TcpStream>>,
    /// Every command read, as its words joined by spaces.
    log: Mutex<Vec<String>>,
    /// The error answer (without `-`) to a command, by its words joined by spaces.
    refusals: Mutex<HashMap<String, String>>,
    /// Sent, once, before the answer to the next command.
    prelude: Mutex<Vec<u8>>,
}

impl ScriptedRedis {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = ScriptedRedis {
            port: listener.local_addr().unwrap().port(),
            script: Arc::default(),
        };
        let script = Arc::clone(&server.script);
        // Both threads end with the test process.
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                script.connections.fetch_add(1, Ordering::SeqCst);
                *script.latest.lock() = stream.try_clone().ok();
                let script = Arc::clone(&script);
                std::thread::spawn(move || {
                    answer(stream, &script);
                    script.closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        server
    }

    fn hub(&self, response_timeout: Duration) -> PubSub {
        let info = redis::IntoConnectionInfo::into_connection_info(format!(
            "redis://127.0.0.1:{}",
            self.port
        ))
        .unwrap();
        let notices = Notices {
            channel: "notices".into(),
            handler: Box::new(|_| {}),
        };
        PubSub::start(&info, None, None, None, NO_HANG, response_timeout, notices).unwrap()
    }

    fn connections(&self) -> usize {
        self.script.connections.load(Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.script.closed.load(Ordering::SeqCst)
    }

    /// Makes the server answer every command up to and including `command` (its words
    /// joined by spaces), and then read nothing more until it [thaws](Self::thaw).
    fn freeze_after(&self, command: &str) {
        *self.script.freeze_after.lock() = Some(command.to_owned());
    }

    fn is_frozen(&self) -> bool {
        self.script.frozen.load(Ordering::SeqCst)
    }

    /// Makes the server read and answer again.
    fn thaw(&self) {
        self.script.frozen.store(false, Ordering::SeqCst);
    }

    fn send_raw(&self, bytes: &[u8]) {
        let mut latest = self.script.latest.lock();
        latest.as_mut().unwrap().write_all(bytes).unwrap();
    }

    /// Waits up to `limit` for `expected` to wait among the bytes the server has not read
    /// on the latest connection (a frozen server reads none; any byte will do when `expected`
    /// is empty); answers whether it came. Only peeks: the server reads them once it thaws.
    fn has_unread_within(&self, limit: Duration, expected: &[u8]) -> bool {
        let give_up_at = Instant::now() + limit;
        // A handle of its own, so the lock is not held while waiting.
        let stream = {
            let latest = self.script.latest.lock();
            latest.as_ref().unwrap().try_clone().unwrap()
        };
        let mut peeked = vec![0u8; 64 * 1024];
        loop {
            let left = give_up_at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            // The read timeout is the socket's, shared with the server's own handle: a read
            // under way keeps the timeout it started with, and it is restored before the
            // server reads again.
            stream.set_read_timeout(Some(left)).unwrap();
            let outcome = stream.peek(&mut peeked);
            stream.set_read_timeout(None).unwrap();
            match outcome {
                Ok(0) => return false,
                Ok(length) if contains(&peeked[..length], expected) => return true,
                // More is on its way.
                Ok(_) => std::thread::sleep(Duration::from_millis(10)),
                // The wait timed out; the loop ends at the limit.
                Err(_) => {}
            }
        }
    }

    /// Whether it read `command` (words joined by spaces).
    fn got(&self, command: &str) -> bool {
        self.script
            .log
            .lock()
            .iter()
            .any(|logged| logged == command)
    }

    /// Answers `command` (its words joined by spaces) with the error `reply`.
    fn refuse(&self, command: &str, reply: &str) {
        self.script
            .refusals
            .lock()
            .insert(command.to_owned(), reply.to_owned());
    }

    fn before_next_answer(&self, bytes: &[u8]) {
        self.script.prelude.lock().extend_from_slice(bytes);
    }
}

/// Serves one connection until it ends.
fn answer(mut stream: TcpStream, script: &Script) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut subscriptions = 0i64;
    loop {
        // Before every command and every read: a freeze that the answer to one command set
        // stops the next, even one read with it.
        while script.frozen.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // A frame too large to parse is never answered: the server reads on.
        if let Ok(Some((command, used))) = frame::parse(&buffer) {
            buffer.drain(..used);
            match answer_one(command, script, &mut subscriptions) {
                Some(reply) if stream.write_all(&reply).is_ok() => continue,
                _ => return,
            }
        }
        let read = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// Logs one command and makes its answer; `None` for a frame that is no command.
fn answer_one(command: Frame, script: &Script, subscriptions: &mut i64) -> Option<Vec<u8>> {
    let Frame::Array(Some(words)) = command else {
        return None;
    };
    let words: Vec<Vec<u8>> = words
        .iter()
        .filter_map(|word| word.as_bytes().map(<[u8]>::to_vec))
        .collect();
    if words.iter().all(|word| word.len() < 1024) {
        let logged: Vec<String> = words
            .iter()
            .map(|word| String::from_utf8_lossy(word).into_owned())
            .collect();
        let logged = logged.join(" ");
        let mut freeze_after = script.freeze_after.lock();
        if freeze_after.as_ref() == Some(&logged) {
            *freeze_after = None;
            script.frozen.store(true, Ordering::SeqCst);
        }
        drop(freeze_after);
        script.log.lock().push(logged);
    }
    let mut reply = std::mem::take(&mut *script.prelude.lock());
    let kind = words[0].to_ascii_lowercase();
    match kind.as_slice() {
        b"auth" if script.refuse_login.load(Ordering::SeqCst) => {
            reply.extend_from_slice(b"-WRONGPASS invalid username-password pair\r\n");
        }
        b"auth" => reply.extend_from_slice(b"+OK\r\n"),
        b"subscribe" | b"unsubscribe" | b"ssubscribe" | b"sunsubscribe" => {
            for channel in &words[1..] {
                let command = format!(
                    "{} {}",
                    String::from_utf8_lossy(&words[0]),
                    String::from_utf8_lossy(channel)
                );
                if let Some(refusal) = script.refusals.lock().get(&command) {
                    reply.extend_from_slice(format!("-{refusal}\r\n").as_bytes());
                    continue;
                }
                *subscriptions += if kind.ends_with(b"unsubscribe") {
                    -1
                } else {
                    1
                };
                reply.extend_from_slice(b"*3\r\n");
                push_bulk(&mut reply, &kind);
                push_bulk(&mut reply, channel);
                reply.extend_from_slice(format!(":{subscriptions}\r\n").as_bytes());
            }
        }
        _ => reply.extend_from_slice(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"),
    }
    Some(reply)
}

/// A command as the hub sends it: an array of bulk strings.
fn packed(words: &[&str]) -> Vec<u8> {
    let mut command = redis::cmd(words[0]);
    for word in &words[1..] {
        command.arg(*word);
    }
    command.get_packed_command()
}

/// Whether `needle` occurs in `haystack` (an empty one does).
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

fn push_bulk(reply: &mut Vec<u8>, bytes: &[u8]) {
    reply.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
    reply.extend_from_slice(bytes);
    reply.extend_from_slice(b"\r\n");
}

/// A frame of three bulk strings, as Redis sends for messages and (un)subscriptions.
fn frame_of(words: [&str; 3]) -> Vec<u8> {
    let mut bytes = b"*3\r\n".to_vec();
    for word in words {
        push_bulk(&mut bytes, word.as_bytes());
    }
    bytes
}

/// Waits up to `limit` for `condition`.
fn eventually(limit: Duration, condition: impl Fn() -> bool) -> bool {
    let give_up_at = Instant::now() + limit;
    while Instant::now() < give_up_at {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    condition()
}

/// How long a step may take that must only not hang (a connection, an answer, a step that
/// must not wait for the stalled write): far more than it takes on a slow, loaded machine,
/// and far less than the stalled write lasts unless the test ends it. Also the hubs' connect
/// and response timeouts, which no test waits out: a subscription that returns unconfirmed
/// was not answered, not answered late.
const NO_HANG: Duration = Duration::from_secs(10);

#[test]
fn a_stalled_write_holds_up_no_other_waiter() {
    let server = ScriptedRedis::start();
    // Also the write timeout: the stalled write outlasts every wait below together, so it
    // ends only when the test ends it.
    let hub = server.hub(NO_HANG * 12);
    // The server answers this subscription, then reads nothing more until it thaws.
    server.freeze_after("SUBSCRIBE channel:a");
    let first = hub.subscribe("channel:a", "a").unwrap();
    assert!(first.is_live());
    assert!(server.is_frozen());
    let thaw = || server.thaw();
    std::thread::scope(|scope| {
        let hub = &hub;
        // Before a failure: lets the write through and ends the connection, so that every
        // thread, one held up behind the write included, ends before the write timeout.
        let end_the_stall_unless = |fine: bool| {
            if !fine {
                thaw();
                hub.stop();
            }
        };
        // Far more than the socket buffers of both ends hold: the write stalls.
        let huge = 64 * 1024 * 1024;
        let stalled = scope.spawn(move || {
            let huge_channel = "x".repeat(huge);
            let _ = hub.subscribe(&huge_channel, "huge").unwrap();
        });
        // Its bytes reach the server, which reads none of them: the write is under way, its
        // command queued and taken by the writer.
        let its_start = format!("*2\r\n$9\r\nSUBSCRIBE\r\n${huge}\r\n");
        let started = server.has_unread_within(NO_HANG, its_start.as_bytes());
        end_the_stall_unless(started);
        assert!(started, "the write did not start");

        // A channel already subscribed needs no command: joining it, asking about it and
        // leaving it must not wait for the stalled write.
        let outcome = join_ask_and_leave(scope, hub, "channel:a");
        let still_stalled = !stalled.is_finished();
        end_the_stall_unless(outcome.is_ok() && still_stalled);
        let (live, channels) = outcome.expect("a waiter was held up behind the stalled write");
        assert!(live);
        assert_eq!(channels, 2);
        // The order that matters: all of it was done while the write still stalled.
        assert!(still_stalled, "the write stopped stalling too early");

        // And the listener still hands out wakes: a release wakes the waiter of the channel.
        let woken = wakes_on_release(&server, &first, "channel:a");
        let still_stalled = !stalled.is_finished();
        end_the_stall_unless(woken && still_stalled);
        assert!(woken, "a release was held up behind the stalled write");
        assert!(still_stalled, "the write stopped stalling too early");

        // Ends the connection, so the stalled write fails at once.
        hub.stop();
        stalled.join().unwrap();
    });
    thaw();
}

/// Joins `channel` (subscribed already), asks whether it is live and how many channels the
/// hub has, and leaves it, on a thread of `scope`'s, so that a step held up fails the test
/// instead of hanging it: what it found, or an error after [`NO_HANG`].
fn join_ask_and_leave<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    hub: &'scope PubSub,
    channel: &'static str,
) -> Result<(bool, usize), crossbeam_channel::RecvTimeoutError> {
    let (done, finished) = crossbeam_channel::bounded(1);
    scope.spawn(move || {
        let second = hub.subscribe(channel, "a").unwrap();
        let live = second.is_live();
        let channels = hub.channel_count();
        drop(second);
        let _ = done.send((live, channels));
    });
    finished.recv_timeout(NO_HANG)
}

/// Whether a release published on `channel` now wakes the waiter of `subscription` within
/// [`NO_HANG`] (wakes from before are dropped first).
fn wakes_on_release(server: &ScriptedRedis, subscription: &Subscription, channel: &str) -> bool {
    subscription.woken().try_iter().for_each(drop);
    server.send_raw(&frame_of(["message", channel, "0"]));
    subscription.wait(NO_HANG)
}

#[test]
fn a_corrupt_frame_makes_the_listener_reconnect() {
    let server = ScriptedRedis::start();
    let hub = server.hub(NO_HANG);
    let subscription = hub.subscribe("channel:a", "a").unwrap();
    assert!(subscription.is_live());

    let nested = b"*1\r\n".repeat(100_000);
    let oversized = format!("${}\r\n", u64::MAX);
    let overflowing = format!("${}\r\n", usize::MAX - 1);
    let endless_line = [b"+".as_slice(), &[b'x'; 100_000]].concat();
    let corruptions: [&[u8]; 5] = [
        b"?garbage\r\n",
        &nested,
        oversized.as_bytes(),
        overflowing.as_bytes(),
        &endless_line,
    ];
    for (round, corrupt) in corruptions.into_iter().enumerate() {
        let connections = server.connections();
        subscription.woken().try_iter().for_each(drop);
        server.send_raw(corrupt);
        assert!(
            eventually(NO_HANG, || server.connections() > connections
                && subscription.is_live()),
            "round {round}: no live subscription again"
        );
        // The reconnection woke the waiter, as a release may have gone by unseen.
        assert!(subscription.wait(NO_HANG), "round {round}");
    }
    drop(subscription);
    hub.stop();
}

#[test]
fn a_refused_login_fails_the_start_at_once() {
    let redis = redlease_testing::RedisServer::start().expect("redis-server");
    let created = redis
        .command(&[
            "ACL",
            "SETUSER",
            "waiter",
            "on",
            ">right-secret",
            "~*",
            "&*",
            "+@all",
        ])
        .unwrap();
    assert!(created.starts_with("+OK"), "{created}");
    let connect_timeout = NO_HANG;
    // A wrong password, an unknown user, and a password for the default user, which has none.
    let logins = [
        (Some("waiter"), "wrong-secret"),
        (Some("nobody"), "right-secret"),
        (None, "no-secret-is-set"),
    ];
    for (user, password) in logins {
        let url = format!(
            "redis://{}:{password}@127.0.0.1:{}/",
            user.unwrap_or_default(),
            redis.port()
        );
        let info = redis::IntoConnectionInfo::into_connection_info(url).unwrap();
        let notices = Notices {
            channel: "notices".into(),
            handler: Box::new(|_| {}),
        };
        let started = Instant::now();
        let outcome = PubSub::start(
            &info,
            None,
            None,
            None,
            connect_timeout,
            Duration::from_secs(1),
            notices,
        );
        // The refusal ends the wait for the first connection; the timeout does not.
        assert!(started.elapsed() < connect_timeout / 2, "{user:?}");
        match outcome {
            Err(err @ Error::AuthenticationFailed { .. }) => {
                assert!(
                    matches!(&err, Error::AuthenticationFailed { user: named } if named.as_deref() == user),
                    "{err:?}"
                );
                assert!(!err.to_string().contains(password), "{err}");
            }
            Err(err) => panic!("{user:?}: {err:?}"),
            Ok(_) => panic!("{user:?}: started"),
        }
    }
}
