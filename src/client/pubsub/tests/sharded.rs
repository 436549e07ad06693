//! Sharded mode and the cluster's hubs against scripted nodes and a slot map the tests set: the
//! frames of shard channels, the subscriptions the nodes end on their own, `MOVED` answers,
//! subscriptions that follow their slot, and the hubs' lives.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::ConnectionInfo;

use super::{eventually, frame_of, packed, push_bulk, ScriptedRedis, NO_HANG};
use crate::client::pubsub::channels::Mode;
use crate::client::pubsub::{Notices, PubSub, SlotOwners};
use crate::client::topology::cluster::NodeAddress;
use crate::error::Error;

/// A slot map the test sets: every slot has the same owner.
pub(super) struct FixedMap {
    map: Mutex<Map>,
    /// How many times the hub asked for the map again.
    pub(super) refreshes: AtomicUsize,
    /// The password of the node URLs, if any.
    password: Option<String>,
}

struct Map {
    owner: Option<NodeAddress>,
    masters: Vec<NodeAddress>,
    generation: u64,
}

impl FixedMap {
    pub(super) fn new(owner: Option<NodeAddress>, masters: Vec<NodeAddress>) -> Arc<Self> {
        Arc::new(FixedMap {
            map: Mutex::new(Map {
                owner,
                masters,
                generation: 1,
            }),
            refreshes: AtomicUsize::new(0),
            password: None,
        })
    }

    /// A new generation of the map.
    pub(super) fn set(&self, owner: Option<NodeAddress>, masters: Vec<NodeAddress>) {
        let mut map = self.map.lock();
        map.owner = owner;
        map.masters = masters;
        map.generation += 1;
    }

    pub(super) fn refreshes(&self) -> usize {
        self.refreshes.load(Ordering::SeqCst)
    }
}

impl SlotOwners for FixedMap {
    fn owner_of(&self, _slot: u16) -> Option<NodeAddress> {
        self.map.lock().owner.clone()
    }

    fn masters(&self) -> Vec<NodeAddress> {
        self.map.lock().masters.clone()
    }

    fn generation(&self) -> u64 {
        self.map.lock().generation
    }

    fn refresh_soon(&self) {
        self.refreshes.fetch_add(1, Ordering::SeqCst);
    }

    fn node_info(&self, address: &NodeAddress) -> ConnectionInfo {
        let password = self.password.as_deref().unwrap_or_default();
        let url = format!("redis://:{password}@{address}");
        redis::IntoConnectionInfo::into_connection_info(url).unwrap()
    }
}

pub(super) fn address_of(port: u16) -> NodeAddress {
    NodeAddress {
        host: "127.0.0.1".into(),
        port,
    }
}

/// What the notice handler heard: the payload, and the name of the thread it ran on.
pub(super) type Heard = Arc<Mutex<Vec<(Vec<u8>, Option<String>)>>>;

/// The cluster's hubs over `map` in `mode`, with the handler's record of notices; its connect and
/// response timeouts are [`NO_HANG`].
pub(super) fn cluster_hub(map: &Arc<FixedMap>, mode: Mode) -> (PubSub, Heard) {
    cluster_hub_or_error(map, mode).unwrap()
}

fn cluster_hub_or_error(map: &Arc<FixedMap>, mode: Mode) -> crate::error::Result<(PubSub, Heard)> {
    let heard: Heard = Arc::default();
    let notices = Notices {
        channel: "notices".into(),
        handler: Box::new({
            let heard = Arc::clone(&heard);
            move |payload| {
                let thread = std::thread::current().name().map(str::to_owned);
                heard.lock().push((payload.to_vec(), thread));
            }
        }),
    };
    let owners: Arc<dyn SlotOwners> = Arc::clone(map) as Arc<dyn SlotOwners>;
    let hub = PubSub::start_over(owners, mode, None, NO_HANG, NO_HANG, notices)?;
    Ok((hub, heard))
}

/// The frame by which Redis ends a subscription (`unsubscribe`, `sunsubscribe`).
fn ended(kind: &str, channel: &str, remaining: i64) -> Vec<u8> {
    let mut bytes = b"*3\r\n".to_vec();
    push_bulk(&mut bytes, kind.as_bytes());
    push_bulk(&mut bytes, channel.as_bytes());
    bytes.extend_from_slice(format!(":{remaining}\r\n").as_bytes());
    bytes
}

const LIMIT: Duration = Duration::from_secs(5);

#[test]
fn sharded_mode_uses_shard_commands_for_releases_and_plain_ones_for_notices() {
    let node = ScriptedRedis::start();
    let map = FixedMap::new(Some(address_of(node.port)), vec![address_of(node.port)]);
    let (hub, heard) = cluster_hub(&map, Mode::Sharded);
    assert!(node.got("SUBSCRIBE notices"));

    let subscription = hub.subscribe("channel:{a}", "a").unwrap();
    assert!(subscription.is_live());
    assert!(node.got("SSUBSCRIBE channel:{a}"));
    assert!(!node.got("SUBSCRIBE channel:{a}"));

    // A plain message on a release channel is not one of its releases: the listener takes
    // frames in order, so once the notice sent after it is heard, the message was dealt with,
    // and woke no one.
    node.send_raw(&frame_of(["message", "channel:{a}", "0"]));
    node.send_raw(&frame_of(["message", "notices", "force-released"]));
    assert!(eventually(LIMIT, || !heard.lock().is_empty()));
    assert!(!subscription.wait(Duration::ZERO));
    node.send_raw(&frame_of(["smessage", "channel:{a}", "0"]));
    assert!(subscription.wait(LIMIT));

    let (payload, thread) = heard.lock()[0].clone();
    assert_eq!(payload, b"force-released");
    // The listener of the node's hub, named after the node.
    assert_eq!(
        thread.as_deref(),
        Some(format!("redlease-pubsub-127.0.0.1:{}", node.port).as_str())
    );

    drop(subscription);
    assert!(eventually(LIMIT, || node.got("SUNSUBSCRIBE channel:{a}")));
    assert!(eventually(LIMIT, || hub.channel_count() == 0));
    hub.stop();
}

#[test]
fn a_subscription_the_node_ends_is_dropped_and_answers_no_command() {
    let node = ScriptedRedis::start();
    let map = FixedMap::new(Some(address_of(node.port)), vec![address_of(node.port)]);
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let mut moved_away = hub.subscribe("a", "a").unwrap();
    assert!(moved_away.is_live());

    // The node ends the subscription to `a` (its slot left) right before it refuses the
    // next command: the refusal is that command's, not taken by the frame that answers none.
    node.before_next_answer(&ended("sunsubscribe", "a", 0));
    node.refuse("SSUBSCRIBE b", "NOPERM No permissions to access a channel");
    match hub.subscribe("b", "b") {
        Err(Error::PermissionDenied { .. }) => {}
        Err(err) => panic!("{err:?}"),
        Ok(_) => panic!("the refusal of b was not b's"),
    }

    assert!(!moved_away.is_live());
    // Woken, to try again at once and to move.
    assert!(moved_away.wait(LIMIT));
    // The map still names the node: the subscription asks for the map again and subscribes
    // there again.
    let refreshes = map.refreshes();
    assert!(moved_away.follow().unwrap());
    assert!(map.refreshes() > refreshes);
    assert!(moved_away.is_live());
    let resubscribed = node
        .script
        .log
        .lock()
        .iter()
        .filter(|logged| *logged == "SSUBSCRIBE a")
        .count();
    assert_eq!(resubscribed, 2);
    // Nothing changed since: nothing to do.
    assert!(!moved_away.follow().unwrap());
    hub.stop();
}

#[test]
fn an_answer_to_our_own_sunsubscribe_is_not_taken_for_the_nodes() {
    let node = ScriptedRedis::start();
    let map = FixedMap::new(Some(address_of(node.port)), vec![address_of(node.port)]);
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let staying = hub.subscribe("stays", "s").unwrap();
    let leaving = hub.subscribe("leaves", "l").unwrap();
    drop(leaving);
    assert!(eventually(LIMIT, || node.got("SUNSUBSCRIBE leaves")));
    assert!(eventually(LIMIT, || hub.channel_count() == 1));
    // The channel left answered, and the other stays live: the answer was matched with our
    // command.
    assert!(staying.is_live());
    let again = hub.subscribe("leaves", "l").unwrap();
    assert!(again.is_live());
    hub.stop();
}

#[test]
fn a_slot_that_leaves_while_we_unsubscribe_leaves_the_hub_sound() {
    let node = ScriptedRedis::start();
    let map = FixedMap::new(Some(address_of(node.port)), vec![address_of(node.port)]);
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let leaving = hub.subscribe("a", "a").unwrap();
    // The answer to `z` is the node's last until it thaws: our next commands wait in its
    // socket.
    node.freeze_after("SSUBSCRIBE z");
    let staying = hub.subscribe("z", "z").unwrap();
    assert!(staying.is_live());
    assert!(node.is_frozen());

    // The slot of `a` leaves while our `SUNSUBSCRIBE a` and then `SSUBSCRIBE b` are on their
    // way: the node ends `a` itself, then refuses our `SUNSUBSCRIBE a` (it serves the slot no
    // more), then confirms `b`.
    node.before_next_answer(&ended("sunsubscribe", "a", 1));
    node.refuse("SUNSUBSCRIBE a", "MOVED 15495 127.0.0.1:1");
    drop(leaving);
    std::thread::scope(|scope| {
        let subscribing = scope.spawn(|| hub.subscribe("b", "b"));
        // Until both commands have reached the node, in this order, unread: the hub awaits
        // both answers before the node gives any.
        let due = [packed(&["SUNSUBSCRIBE", "a"]), packed(&["SSUBSCRIBE", "b"])].concat();
        let on_their_way = node.has_unread_within(LIMIT, &due);
        node.thaw();
        assert!(on_their_way, "the commands did not reach the node");
        let mut taken_for_moved = subscribing.join().unwrap().unwrap();
        // The refusal was taken for `b`'s: `b` looks moved, its waiter asks for it again.
        assert!(!taken_for_moved.is_live());
        assert!(taken_for_moved.follow().unwrap());
        assert!(taken_for_moved.is_live());
    });
    // The commands due are right again: a new subscription is confirmed at once, not once
    // the response timeout (`NO_HANG`) has passed.
    let started = Instant::now();
    let next = hub.subscribe("c", "c").unwrap();
    assert!(next.is_live());
    assert!(started.elapsed() < NO_HANG / 2);
    assert!(staying.is_live());
    hub.stop();
}

#[test]
fn a_moved_answer_drops_the_subscription_instead_of_failing_the_waiter() {
    let old = ScriptedRedis::start();
    let new = ScriptedRedis::start();
    let map = FixedMap::new(
        Some(address_of(old.port)),
        vec![address_of(old.port), address_of(new.port)],
    );
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    old.refuse(
        "SSUBSCRIBE c",
        &format!("MOVED 7365 127.0.0.1:{}", new.port),
    );

    let mut subscription = hub.subscribe("c", "c").unwrap();
    assert!(!subscription.is_live());
    assert!(subscription.wait(LIMIT));
    // The map is not refreshed yet: asked again, the old node answers `MOVED` again, and
    // the subscription stays where it is, not live (the wait loop polls meanwhile).
    assert!(!subscription.follow().unwrap());
    assert!(map.refreshes() >= 1);
    assert!(!subscription.is_live());

    map.set(
        Some(address_of(new.port)),
        vec![address_of(old.port), address_of(new.port)],
    );
    assert!(subscription.follow().unwrap());
    assert!(subscription.is_live());
    assert!(new.got("SSUBSCRIBE c"));
    assert!(!subscription.follow().unwrap());
    // The old node never had it: nothing to unsubscribe there. A node reads a hub's commands
    // in the order they were queued: an `SUNSUBSCRIBE c` queued when the subscription left
    // would have reached it before the subscription to another channel there.
    map.set(
        Some(address_of(old.port)),
        vec![address_of(old.port), address_of(new.port)],
    );
    let later = hub.subscribe("later", "later").unwrap();
    assert!(later.is_live());
    assert!(old.got("SSUBSCRIBE later"));
    assert!(!old.got("SUNSUBSCRIBE c"));
    drop(later);
    hub.stop();
}

#[test]
fn a_subscription_follows_its_slot_and_keeps_its_wake() {
    let first = ScriptedRedis::start();
    let second = ScriptedRedis::start();
    let both = vec![address_of(first.port), address_of(second.port)];
    let map = FixedMap::new(Some(address_of(first.port)), both.clone());
    let (hub, _) = cluster_hub(&map, Mode::Sharded);

    let mut subscription = hub.subscribe("d", "d").unwrap();
    assert!(subscription.is_live());
    assert!(!subscription.follow().unwrap());
    // A release heard on the old node, not yet taken by the waiter.
    first.send_raw(&frame_of(["smessage", "d", "0"]));
    assert!(eventually(LIMIT, || !subscription.woken().is_empty()));

    map.set(Some(address_of(second.port)), both);
    assert!(subscription.follow().unwrap());
    assert!(subscription.is_live());
    assert!(second.got("SSUBSCRIBE d"));
    assert!(eventually(LIMIT, || first.got("SUNSUBSCRIBE d")));
    // The wake moved with the waiter.
    assert!(subscription.wait(Duration::ZERO));
    assert!(!subscription.follow().unwrap());

    second.send_raw(&frame_of(["smessage", "d", "0"]));
    assert!(subscription.wait(LIMIT));
    hub.stop();
}

#[test]
fn hubs_of_nodes_that_left_the_map_stop_once_unused() {
    let leaving = ScriptedRedis::start();
    let staying = ScriptedRedis::start();
    let map = FixedMap::new(
        Some(address_of(leaving.port)),
        vec![address_of(leaving.port), address_of(staying.port)],
    );
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let mut subscription = hub.subscribe("e", "e").unwrap();
    assert!(subscription.is_live());
    assert_eq!(staying.connections(), 0, "spawned before it was needed");

    // A failover: the other node serves the slot, the old one is no master anymore.
    map.set(
        Some(address_of(staying.port)),
        vec![address_of(staying.port)],
    );
    assert!(subscription.follow().unwrap());
    assert!(eventually(LIMIT, || leaving.got("SUNSUBSCRIBE e")));
    // The old node's listener has taken the answer: only then is its hub unused (a channel
    // on its way from one node to another counts twice). The node's log tells only that the
    // command arrived, and the hub is matched with the map once per change of it.
    assert!(eventually(LIMIT, || hub.channel_count() == 1));
    // Seen at the next change of the map: the old node's hub, unused now, stops.
    map.set(
        Some(address_of(staying.port)),
        vec![address_of(staying.port)],
    );
    let other = hub.subscribe("f", "f").unwrap();
    assert!(eventually(LIMIT, || leaving.closed() == 1));
    assert_eq!(hub.channel_count(), 2);
    drop((subscription, other));
    hub.stop();
    assert!(eventually(LIMIT, || staying.closed() == staying.connections()));
}

#[test]
fn an_unreachable_node_makes_the_hub_ask_for_the_map_and_move_on() {
    let alive = ScriptedRedis::start();
    // A port nothing listens on.
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let map = FixedMap::new(
        Some(address_of(dead_port)),
        vec![address_of(alive.port), address_of(dead_port)],
    );
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let mut subscription = hub.subscribe("g", "g").unwrap();
    assert!(!subscription.is_live());
    // The dead node's listener asks for the map again after each failed attempt.
    assert!(eventually(LIMIT, || map.refreshes() >= 2));
    assert!(!subscription.follow().unwrap());

    map.set(Some(address_of(alive.port)), vec![address_of(alive.port)]);
    assert!(subscription.follow().unwrap());
    assert!(subscription.is_live());
    // With no channel left on it and out of the map, the dead node's hub stops at its next
    // failed attempt (within a second): its listener asks for the map no more.
    assert!(eventually(LIMIT, || {
        let before = map.refreshes();
        std::thread::sleep(Duration::from_millis(1500));
        map.refreshes() == before
    }));
    hub.stop();
}

#[test]
fn plain_mode_subscribes_with_subscribe_even_where_no_master_serves_the_slot() {
    let node = ScriptedRedis::start();
    let map = FixedMap::new(None, vec![address_of(node.port)]);
    let (hub, _) = cluster_hub(&map, Mode::Plain);
    let subscription = hub.subscribe_to_every_message("latch:{h}").unwrap();
    // Every node hears a plain `PUBLISH`: the first master does.
    assert!(subscription.is_live());
    assert!(node.got("SUBSCRIBE latch:{h}"));
    node.send_raw(&frame_of(["message", "latch:{h}", "0"]));
    assert!(subscription.wait(LIMIT));
    hub.stop();
}

#[test]
fn in_sharded_mode_a_slot_without_master_polls_until_one_serves_it() {
    let node = ScriptedRedis::start();
    let map = FixedMap::new(None, vec![address_of(node.port)]);
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let mut subscription = hub.subscribe("i", "i").unwrap();
    assert!(!subscription.is_live());
    assert!(!subscription.follow().unwrap());
    assert!(map.refreshes() >= 2);

    map.set(Some(address_of(node.port)), vec![address_of(node.port)]);
    assert!(subscription.follow().unwrap());
    assert!(subscription.is_live());
    hub.stop();
}

#[test]
fn a_refused_login_at_the_first_master_fails_the_start() {
    let node = ScriptedRedis::start();
    node.script.refuse_login.store(true, Ordering::SeqCst);
    let mut map = FixedMap::new(Some(address_of(node.port)), vec![address_of(node.port)]);
    Arc::get_mut(&mut map).unwrap().password = Some("wrong".into());
    match cluster_hub_or_error(&map, Mode::Sharded) {
        Err(Error::AuthenticationFailed { user: None }) => {}
        Err(err) => panic!("{err:?}"),
        Ok(_) => panic!("started"),
    }
}

#[test]
fn a_stopped_cluster_hub_refuses_new_waiters() {
    let node = ScriptedRedis::start();
    let map = FixedMap::new(Some(address_of(node.port)), vec![address_of(node.port)]);
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let mut subscription = hub.subscribe("j", "j").unwrap();
    hub.stop();
    assert!(eventually(LIMIT, || node.closed() == node.connections()));
    assert!(matches!(hub.subscribe("k", "k"), Err(Error::ShutDown)));
    map.set(Some(address_of(node.port)), vec![]);
    assert!(matches!(subscription.follow(), Ok(false)));
}

/// Sets its flag when dropped: lets a waiter through when a test ends, failed assertions
/// included, so that a thread scope does not wait for it forever.
struct SetOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn the_wait_loop_moves_a_subscription_the_node_ended_and_is_woken_at_the_new_node() {
    use crate::client::stats::WaitRecorder;
    use crate::client::wait::{wait_until, Attempt, WaitFor};

    let first = ScriptedRedis::start();
    let second = ScriptedRedis::start();
    let both = vec![address_of(first.port), address_of(second.port)];
    let map = FixedMap::new(Some(address_of(first.port)), both.clone());
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tries = Arc::new(AtomicUsize::new(0));
    let recorder = WaitRecorder::new();
    let hint = Duration::from_secs(30);
    std::thread::scope(|scope| {
        let _release_at_the_end = SetOnDrop(&released);
        let waiting = scope.spawn(|| {
            wait_until(WaitFor {
                deadline: None,
                default_hint: hint,
                subscribe: || Ok(vec![hub.subscribe("m", "m")?]),
                attempt: || {
                    tries.fetch_add(1, Ordering::SeqCst);
                    Ok(if released.load(Ordering::SeqCst) {
                        Attempt::Taken(())
                    } else {
                        Attempt::Held { hint: Some(hint) }
                    })
                },
                ensure_running: || Ok(()),
                cancel: None,
                outage_grace: Duration::ZERO,
                recorder: &recorder,
                name: Some("m"),
                nudge: None,
                subscribe_first: false,
            })
        });
        // Asleep on a live subscription at the first node, for the whole hint.
        assert!(eventually(LIMIT, || first.got("SSUBSCRIBE m")
            && tries.load(Ordering::SeqCst) == 2));

        // The slot migrates: the map names the second node, and the first ends the
        // subscription, which wakes the waiter to move.
        map.set(Some(address_of(second.port)), both);
        first.send_raw(&ended("sunsubscribe", "m", 0));
        assert!(eventually(LIMIT, || second.got("SSUBSCRIBE m")));
        // Tried once when woken and once more after the move.
        assert!(eventually(LIMIT, || tries.load(Ordering::SeqCst) == 4));

        let started = std::time::Instant::now();
        released.store(true, Ordering::SeqCst);
        second.send_raw(&frame_of(["smessage", "m", "0"]));
        assert!(matches!(waiting.join().unwrap(), Ok(Some(()))));
        // Woken by the release at the new node, not by the end of the hint.
        assert!(started.elapsed() < LIMIT);
    });
    hub.stop();
}

/// A hub of a node that left the map while a channel was on it stops once the node answers
/// the last `SUNSUBSCRIBE`, without another change of the map.
#[test]
fn a_leaving_hub_stops_at_the_answer_to_its_last_unsubscribe() {
    let leaving = ScriptedRedis::start();
    let staying = ScriptedRedis::start();
    let map = FixedMap::new(
        Some(address_of(leaving.port)),
        vec![address_of(leaving.port), address_of(staying.port)],
    );
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let mut subscription = hub.subscribe("e", "e").unwrap();
    assert!(subscription.is_live());
    map.set(
        Some(address_of(staying.port)),
        vec![address_of(staying.port)],
    );
    assert!(subscription.follow().unwrap());
    // No further change of the map.
    assert!(eventually(LIMIT, || leaving.closed() == 1));
    assert_eq!(hub.channel_count(), 1);
    drop(subscription);
    hub.stop();
}

/// ... and once its last waiter leaves, when the node ended the subscription itself.
#[test]
fn a_leaving_hub_stops_when_its_last_waiter_leaves() {
    let leaving = ScriptedRedis::start();
    let staying = ScriptedRedis::start();
    let map = FixedMap::new(
        Some(address_of(leaving.port)),
        vec![address_of(leaving.port), address_of(staying.port)],
    );
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let mut subscription = hub.subscribe("e", "e").unwrap();
    assert!(subscription.is_live());
    // The node ends the subscription on its own (the slot left it).
    leaving.send_raw(&frame_of(["sunsubscribe", "e", "0"]));
    assert!(subscription.wait(LIMIT));
    map.set(
        Some(address_of(staying.port)),
        vec![address_of(staying.port)],
    );
    assert!(subscription.follow().unwrap());
    assert!(eventually(LIMIT, || leaving.closed() == 1));
    // The node read all we sent before the connection ended: no `SUNSUBSCRIBE` among it.
    assert!(!leaving.got("SUNSUBSCRIBE e"));
    drop(subscription);
    hub.stop();
}
