//! The throwaway Redis Cluster of `redlease_testing`: it starts whole, its masters serve
//! every slot, a killed master's replica takes over, and a slot moves with its keys, step by
//! step.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use redlease::redis;
use redlease_testing::{RedisCluster, RedisServer};

fn start(masters: usize, replicas: usize) -> RedisCluster {
    let started = Instant::now();
    let cluster = RedisCluster::start(masters, replicas)
        .expect("start a cluster (install redis-server and redis-cli)");
    println!(
        "{masters} masters + {} replicas started in {:?}",
        masters * replicas,
        started.elapsed()
    );
    cluster
}

/// The value of `key` on `node`, from a raw `GET` reply (`$1\r\n7\r\n`).
fn get(node: &RedisServer, key: &str) -> String {
    let reply = node.command(&["GET", key]).expect("GET");
    assert!(
        reply.starts_with('$'),
        "GET {key} on {}: {reply:?}",
        node.port()
    );
    reply.lines().nth(1).unwrap_or_default().to_owned()
}

fn connect(node: &RedisServer) -> redis::Connection {
    redis::Client::open(node.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Sends `ASKING`, then `words`, on one connection to `node`: what a client redirected
/// by `ASK` does.
fn asking<T: redis::FromRedisValue>(node: &RedisServer, words: &[&str]) -> T {
    let mut connection = connect(node);
    let mut command = redis::cmd(words[0]);
    for word in &words[1..] {
        command.arg(*word);
    }
    let ((), reply): ((), T) = redis::pipe()
        .cmd("ASKING")
        .add_command(command)
        .query(&mut connection)
        .unwrap();
    reply
}

fn integer(reply: &str) -> i64 {
    reply
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {reply:?}"))
}

#[test]
fn three_masters_serve_every_slot_and_each_has_its_replica() {
    let cluster = start(3, 1);
    let masters = cluster.masters().unwrap();
    let replicas = cluster.replicas().unwrap();
    assert_eq!(masters.len(), 3);
    assert_eq!(replicas.len(), 3);
    assert_eq!(cluster.seed_urls().len(), 6);

    // Every slot is served by exactly one master.
    let mut served = vec![0u8; 16384];
    for master in &masters {
        assert_eq!(cluster.replicas_of(master).unwrap().len(), 1);
        for (first, last) in cluster.slots_of(master).unwrap() {
            for slot in first..=last {
                served[usize::from(slot)] += 1;
                if slot % 997 == 0 {
                    assert_eq!(cluster.master_of_slot(slot).unwrap().port(), master.port());
                }
            }
        }
    }
    assert!(served.iter().all(|&count| count == 1));

    // Slots as Redis computes them; a hash tag picks the slot.
    assert_eq!(cluster.key_slot("foo").unwrap(), 12182);
    assert_eq!(
        cluster.key_slot("{user1000}.following").unwrap(),
        cluster.key_slot("{user1000}.followers").unwrap()
    );
    // Writes land on the master of the key, which the others redirect to.
    let owner = cluster.master_of_key("foo").unwrap();
    assert!(owner
        .command(&["SET", "foo", "1"])
        .unwrap()
        .starts_with("+OK"));
    let other = masters.iter().find(|m| m.port() != owner.port()).unwrap();
    let moved = other.command(&["GET", "foo"]).unwrap();
    assert!(
        moved.starts_with(&format!("-MOVED 12182 127.0.0.1:{}", owner.port())),
        "{moved:?}"
    );
    // Ids are the nodes' own.
    let id = owner.command(&["CLUSTER", "MYID"]).unwrap();
    assert!(id.contains(cluster.node_id(owner)), "{id:?}");
}

#[test]
fn a_killed_master_is_replaced_by_its_replica_which_has_its_keys() {
    let mut cluster = start(3, 1);
    let slot = cluster.key_slot("survivor").unwrap();
    let master = cluster.master_of_slot(slot).unwrap();
    let replica = cluster.replicas_of(master).unwrap()[0].port();
    // The replica has the key before the kill (WAIT on the connection that wrote it).
    let mut connection = connect(master);
    let ((), acknowledged): ((), i64) = redis::pipe()
        .cmd("SET")
        .arg("survivor")
        .arg(7)
        .cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut connection)
        .unwrap();
    assert_eq!(acknowledged, 1);

    let killed = cluster.kill_master_of_slot(slot).unwrap();
    let killed_at = Instant::now();
    assert!(cluster.node(killed).unwrap().pid().is_none());
    let promoted = cluster
        .wait_for_failover(slot, Duration::from_secs(20))
        .unwrap();
    println!("failover settled {:?} after the kill", killed_at.elapsed());
    assert_eq!(
        promoted.port(),
        replica,
        "the killed master's replica took over"
    );
    assert_eq!(get(promoted, "survivor"), "7");
    assert_eq!(cluster.master_of_key("survivor").unwrap().port(), replica);
    assert_eq!(cluster.masters().unwrap().len(), 3);
    assert_eq!(cluster.replicas().unwrap().len(), 2);

    // The killed master comes back as a replica of the one that replaced it.
    let restarted_at = Instant::now();
    cluster.node_mut(killed).unwrap().restart().unwrap();
    cluster
        .wait_until_settled(Duration::from_secs(20))
        .expect("the old master rejoins");
    println!(
        "the old master rejoined as a replica {:?} after its restart",
        restarted_at.elapsed()
    );
    let replicas_now: Vec<u16> = cluster
        .replicas_of(cluster.node(replica).unwrap())
        .unwrap()
        .iter()
        .map(|node| node.port())
        .collect();
    assert_eq!(replicas_now, [killed]);
}

#[test]
fn a_slot_moves_with_its_keys_step_by_step() {
    let cluster = start(3, 1);
    let slot = cluster.key_slot("{moving}").unwrap();
    let source = cluster.master_of_slot(slot).unwrap();
    let target = *cluster
        .masters()
        .unwrap()
        .iter()
        .find(|master| master.port() != source.port())
        .unwrap();
    // Enough keys for several MIGRATE batches, one with a time to live.
    for i in 0..250 {
        let key = format!("{{moving}}:{i}");
        assert!(source
            .command(&["SET", &key, &i.to_string()])
            .unwrap()
            .starts_with("+OK"));
    }
    assert!(source
        .command(&["SET", "{moving}", "leased", "PX", "60000"])
        .unwrap()
        .starts_with("+OK"));
    assert_eq!(cluster.keys_in_slot(slot).unwrap().len(), 251);

    let started = Instant::now();
    let migration = cluster.begin_migration(slot, target).unwrap();
    assert_eq!(
        (
            migration.slot(),
            migration.source().port(),
            migration.target().port()
        ),
        (slot, source.port(), target.port())
    );
    // MIGRATING: the source still serves the keys it has, and sends new ones over (ASK).
    assert_eq!(get(source, "{moving}:3"), "3");
    let ask = source.command(&["SET", "{moving}:new", "x"]).unwrap();
    assert!(
        ask.starts_with(&format!("-ASK {slot} 127.0.0.1:{}", target.port())),
        "{ask:?}"
    );
    assert_eq!(migration.move_keys().unwrap(), 251);
    assert_eq!(migration.move_keys().unwrap(), 0);
    // Moved: the source redirects, the target has them (with the lease) for clients that
    // were sent there by ASK, and redirects the others back until the slot is its own.
    let ask = source.command(&["GET", "{moving}:3"]).unwrap();
    assert!(ask.starts_with("-ASK"), "{ask:?}");
    assert_eq!(integer(&target.command(&["DBSIZE"]).unwrap()), 251);
    let pttl: i64 = asking(target, &["PTTL", "{moving}"]);
    assert!((50_000..=60_000).contains(&pttl), "PTTL {pttl}");
    let value: String = asking(target, &["GET", "{moving}:3"]);
    assert_eq!(value, "3");
    let moved = target.command(&["GET", "{moving}:3"]).unwrap();
    assert!(
        moved.starts_with(&format!("-MOVED {slot} 127.0.0.1:{}", source.port())),
        "{moved:?}"
    );
    assert_eq!(cluster.master_of_slot(slot).unwrap().port(), source.port());
    migration.finish().unwrap();
    println!("slot {slot} with 251 keys moved in {:?}", started.elapsed());

    // Every node agrees on the new owner; the old one redirects for good.
    assert_eq!(cluster.master_of_slot(slot).unwrap().port(), target.port());
    for node in cluster.nodes() {
        let view = node.command(&["CLUSTER", "NODES"]).unwrap();
        let target_line = view
            .lines()
            .find(|line| line.contains(&format!(":{}@", target.port())))
            .unwrap();
        assert!(
            target_line
                .split_whitespace()
                .skip(8)
                .any(|range| range == slot.to_string()
                    || range.split_once('-').is_some_and(|(first, last)| {
                        (first.parse::<u16>().unwrap()..=last.parse().unwrap()).contains(&slot)
                    })),
            "port {}: {target_line}",
            node.port()
        );
    }
    let moved = source.command(&["GET", "{moving}:3"]).unwrap();
    assert!(
        moved.starts_with(&format!("-MOVED {slot} 127.0.0.1:{}", target.port())),
        "{moved:?}"
    );
    assert_eq!(get(target, "{moving}:249"), "249");
    assert_eq!(cluster.keys_in_slot(slot).unwrap().len(), 251);

    // The other slots did not move; a slot can go back.
    let owners: HashSet<u16> = [0u16, 5000, 10000, 16383]
        .iter()
        .map(|&slot| cluster.master_of_slot(slot).unwrap().port())
        .collect();
    assert_eq!(owners.len(), 3);
    cluster.migrate_slot(slot, source).unwrap();
    assert_eq!(cluster.master_of_slot(slot).unwrap().port(), source.port());
    assert_eq!(get(source, "{moving}:0"), "0");
}

#[test]
fn bad_requests_are_refused() {
    assert_eq!(
        RedisCluster::start(2, 0).unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
}
