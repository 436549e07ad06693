//! Sharded mode against a real cluster of two masters: `SSUBSCRIBE` and `SPUBLISH`, the
//! `sunsubscribe` a node sends on its own when a slot migrates away, `MOVED`, and the
//! subscription following the slot to its new master. The map is the tests' own (the real
//! one is another module's business); the frames are Redis's.

use std::time::{Duration, Instant};

use super::eventually;
use super::sharded::{address_of, cluster_hub, FixedMap};
use crate::client::pubsub::channels::Mode;
use crate::protocol::slot::key_slot;
use redlease_testing::RedisServer;

const LIMIT: Duration = Duration::from_secs(10);

fn cluster_node() -> RedisServer {
    RedisServer::start_with_args(&["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
        .expect("redis-server")
}

/// The one line of a status or bulk string reply, without its framing.
fn value_of(reply: &str) -> String {
    reply
        .lines()
        .find(|line| !line.starts_with('$'))
        .unwrap_or_default()
        .trim_start_matches(['+', ':'])
        .to_owned()
}

fn node_id(node: &RedisServer) -> String {
    value_of(&node.command(&["CLUSTER", "MYID"]).unwrap())
}

fn ok(reply: std::io::Result<String>) {
    let reply = reply.unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
}

/// Two cluster nodes that have met, the first serving every slot.
fn two_met_nodes() -> (RedisServer, RedisServer) {
    let first = cluster_node();
    let second = cluster_node();
    let first_id = node_id(&first);
    ok(first.command(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]));
    let first_port = first.port().to_string();
    ok(second.command(&["CLUSTER", "MEET", "127.0.0.1", &first_port]));
    assert!(
        eventually(LIMIT, || {
            let nodes = second.command(&["CLUSTER", "NODES"]).unwrap();
            let state_ok = |node: &RedisServer| {
                let info = node.command(&["CLUSTER", "INFO"]).unwrap();
                info.contains("cluster_state:ok")
            };
            nodes.contains(&first_id)
                && nodes.contains("0-16383")
                && state_ok(&first)
                && state_ok(&second)
        }),
        "the nodes did not meet"
    );
    (first, second)
}

#[test]
fn a_shard_subscription_follows_its_slot_when_it_migrates() {
    let (first, second) = two_met_nodes();
    let (first_id, second_id) = (node_id(&first), node_id(&second));
    let channel = "redisson_lock__channel:{migrates}";
    let slot = key_slot(channel.as_bytes()).to_string();
    let map = FixedMap::new(
        Some(address_of(first.port())),
        vec![address_of(first.port()), address_of(second.port())],
    );
    let (hub, _) = cluster_hub(&map, Mode::Sharded);
    let mut subscription = hub.subscribe(channel, "migrates").unwrap();
    assert!(subscription.is_live());
    let published = first.command(&["SPUBLISH", channel, "0"]).unwrap();
    assert_eq!(value_of(&published), "1", "{published}");
    assert!(subscription.wait(LIMIT));

    // Migrate the (empty) slot to the second node; the first hears of it from the second
    // and ends our subscription on its own.
    ok(second.command(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &first_id]));
    ok(first.command(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &second_id]));
    ok(second.command(&["CLUSTER", "SETSLOT", &slot, "NODE", &second_id]));
    ok(first.command(&["CLUSTER", "SETSLOT", &slot, "NODE", &second_id]));
    assert!(subscription.wait(LIMIT), "not woken when the slot left");
    assert!(!subscription.is_live());

    // With the map not refreshed yet, the first node answers `MOVED`: no subscription, no
    // error; the waiter polls.
    let refreshes = map.refreshes();
    assert!(!subscription.follow().unwrap());
    assert!(map.refreshes() > refreshes);
    assert!(!subscription.is_live());

    map.set(
        Some(address_of(second.port())),
        vec![address_of(first.port()), address_of(second.port())],
    );
    let started = Instant::now();
    assert!(subscription.follow().unwrap());
    assert!(subscription.is_live());
    assert!(started.elapsed() < LIMIT);
    let published = second.command(&["SPUBLISH", channel, "0"]).unwrap();
    assert_eq!(value_of(&published), "1", "{published}");
    assert!(subscription.wait(LIMIT));

    drop(subscription);
    assert!(eventually(LIMIT, || hub.channel_count() == 0));
    let published = second.command(&["SPUBLISH", channel, "0"]).unwrap();
    assert_eq!(value_of(&published), "0", "{published}");
    hub.stop();
}
