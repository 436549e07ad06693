//! The `redlease-inspect` tool, run as a process against a throwaway server on which another
//! process holds a lock: it shows the holder and its lease (as text and JSON), lists the
//! lock, frees it by force so that the holder's guard hears it, leaves it alone when the
//! operator says no, and shows a fair lock's waiters in order. On every deployment: a
//! TLS-only server (with the test CA, and refused without it), the master a Sentinel names,
//! and a cluster (a lock on each master listed once, with its holder). `watch` sees a
//! handoff.
//!
//! Built only with the `inspect` feature, which the tool needs:
//! `cargo test --features inspect --test suite -- inspect::`.
#![cfg(feature = "inspect")]

use crate::common;

use std::io::{BufReader, Read, Write};
use std::process::{ChildStdout, Command, Stdio};
use std::time::Duration;

use common::{
    child_role, env, eventually, line_with, manager, manager_for_url, server, spawn_child,
    KillOnDrop, RedisServer, CHILD_DEADLINE,
};
use redis::Commands;
use redlease::{Lock, LockManager};
use redlease_testing::sentinel;

/// The environment variable that tells a holder child which server to use.
const URL: &str = "REDLEASE_TEST_URL";
/// How long one run of the tool may take: its own timeouts are 2 s each.
const TOOL_DEADLINE: Duration = Duration::from_secs(20);

/// What one run of the tool did.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the tool against `server` with `args`, `input` on its stdin.
fn tool(server_url: &str, args: &[&str], input: &str) -> Run {
    let mut all = vec!["--url", server_url];
    all.extend_from_slice(args);
    tool_with(&all, input)
}

/// The tool's command with `args` (the deployment's options among them), its output piped.
fn tool_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redlease-inspect"));
    command
        .args(["--connect-timeout", "2", "--response-timeout", "2"])
        .args(args)
        .env_remove("REDLEASE_URL")
        .env_remove("REDLEASE_MASTER_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs the tool with `args`, `input` on its stdin.
fn tool_with(args: &[&str], input: &str) -> Run {
    let mut command = tool_command(args);
    let mut child = KillOnDrop::spawn(&mut command);
    let mut stdin = child.stdin.take().expect("piped stdin");
    // A tool that ends without reading (a failed connection) closes the pipe: no matter.
    let _ = stdin.write_all(input.as_bytes());
    drop(stdin);
    // The tool prints little: it fits in the pipes while it runs.
    let status = child.wait_within(TOOL_DEADLINE);
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    Run {
        code: status.code().expect("the tool exited, not killed"),
        stdout,
        stderr,
    }
}

fn json(run: &Run) -> serde_json::Value {
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|error| panic!("{error}: {}", run.stdout))
}

/// A child process that holds the lock "job" of `server`; answers it, the reader of its
/// output, and its client id.
fn job_held_elsewhere(server: &RedisServer) -> (KillOnDrop, BufReader<ChildStdout>, String) {
    let mut child = spawn_child("inspect::holder_child", "holder", &[(URL, server.url())]);
    let mut output = BufReader::new(child.stdout.take().expect("piped stdout"));
    let client_id = line_with(&mut output, "client-id:");
    line_with(&mut output, "holding");
    (child, output, client_id)
}

/// Child: holds "job" until it hears that it lost it, and says why.
#[test]
#[ignore = "child process of the inspect tests"]
fn holder_child() {
    if child_role().as_deref() != Some("holder") {
        return;
    }
    let manager = manager_for_url(&env(URL), Duration::from_secs(5));
    let guard = manager.lock("job").lock().unwrap();
    let lost = guard.lost_signal();
    println!("client-id: {}", manager.client_id());
    println!("holding");
    match lost.recv_timeout(CHILD_DEADLINE) {
        Ok(reason) => println!("lost: {reason:?}"),
        Err(_) => println!("still held"),
    }
}

#[test]
fn inspect_shows_the_holder_and_its_lease_as_text_and_json() {
    let redis = server();
    let (_child, _output, client_id) = job_held_elsewhere(&redis);

    let text = tool(&redis.url(), &["inspect", "job"], "");
    assert_eq!(text.code, 0, "stderr: {}", text.stderr);
    assert!(
        text.stdout.contains("kind:           lock"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains(&format!("client {client_id}  chain/thread ")),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("lease left:"), "{}", text.stdout);

    let report = json(&tool(&redis.url(), &["--json", "inspect", "job"], ""));
    assert_eq!(report["kind"], "lock");
    assert_eq!(report["held"], true);
    assert_eq!(report["holders"][0]["client_id"], client_id.as_str());
    assert_eq!(report["holders"][0]["count"], 1);
    assert!(report["fencing_token"].as_u64().unwrap() >= 1);
    let lease = report["lease_ms"].as_i64().unwrap();
    assert!(lease > 0 && lease <= 5_000, "{lease}");
}

/// A spin lock is laid out as the lock: the tool shows it as one, with its holder and levels.
#[test]
fn inspect_shows_a_spin_lock_as_the_lock_it_is_laid_out_as() {
    let redis = server();
    let manager = manager_for_url(&redis.url(), Duration::from_secs(30));
    let spin = manager.spin_lock("spun", redlease::BackOff::default());
    let (outer, _inner) = (spin.lock().unwrap(), spin.lock().unwrap());
    let report = json(&tool(&redis.url(), &["--json", "inspect", "spun"], ""));
    assert_eq!(report["kind"], "lock");
    assert_eq!(report["held"], true);
    assert_eq!(report["holders"][0]["client_id"], manager.client_id());
    assert_eq!(report["holders"][0]["count"], 2);
    assert_eq!(report["fencing_token"], outer.fencing_token());
}

#[test]
fn list_finds_the_held_lock_by_pattern() {
    let redis = server();
    let (_child, _output, client_id) = job_held_elsewhere(&redis);

    let text = tool(&redis.url(), &["list", "j*"], "");
    assert_eq!(text.code, 0, "stderr: {}", text.stderr);
    let row = text
        .stdout
        .lines()
        .find(|line| line.starts_with("job "))
        .unwrap_or_else(|| panic!("no row for job: {}", text.stdout));
    assert!(row.contains(&client_id), "{row}");

    let listing = json(&tool(&redis.url(), &["--json", "list", "j*"], ""));
    assert_eq!(listing["locks"][0]["name"], "job");
    assert_eq!(listing["complete"], true);
    let others = json(&tool(&redis.url(), &["--json", "list", "x*"], ""));
    assert_eq!(others["locks"].as_array().unwrap().len(), 0);
}

#[test]
fn break_lock_frees_the_lock_and_the_holder_hears_it() {
    let redis = server();
    let (_child, mut output, client_id) = job_held_elsewhere(&redis);

    let freed = json(&tool(
        &redis.url(),
        &["--json", "break-lock", "job", "--yes"],
        "",
    ));
    assert_eq!(freed["freed"], true);
    assert_eq!(freed["holders"][0]["client_id"], client_id.as_str());
    // The child's guard reports the loss; the line comes within the child's deadline.
    assert_eq!(line_with(&mut output, "lost:"), "ForceReleased");
    let gone = tool(&redis.url(), &["inspect", "job"], "");
    assert_eq!(gone.code, 1, "stdout: {}", gone.stdout);
}

#[test]
fn break_lock_answered_no_leaves_the_lock_held() {
    let redis = server();
    let (_child, _output, client_id) = job_held_elsewhere(&redis);

    let declined = tool(&redis.url(), &["break-lock", "job"], "n\n");
    assert_eq!(declined.code, 1, "stdout: {}", declined.stdout);
    assert!(
        declined.stderr.contains("Free lock \"job\" held by"),
        "{}",
        declined.stderr
    );
    assert!(declined.stderr.contains(&client_id), "{}", declined.stderr);
    let still = json(&tool(&redis.url(), &["--json", "inspect", "job"], ""));
    assert_eq!(still["holders"][0]["client_id"], client_id.as_str());
    // No answer at all (the end of input) declines too.
    assert_eq!(tool(&redis.url(), &["break-lock", "job"], "").code, 1);
}

#[test]
fn inspect_shows_a_fair_locks_waiters_in_order() {
    let redis = server();
    let mut queue = redis::Client::open(redis.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    let holder = manager(&redis, Duration::from_secs(5));
    let guard = holder.fair_lock("fair").lock().unwrap();
    // Two waiters of two clients, the second queued only once the first is in line.
    let waiters: Vec<LockManager> = (0..2)
        .map(|_| manager(&redis, Duration::from_secs(5)))
        .collect();
    let mut threads = Vec::new();
    for (index, waiter) in waiters.iter().enumerate() {
        let lock = waiter.fair_lock("fair");
        threads.push(std::thread::spawn(move || {
            let guard = lock.try_lock_for(Duration::from_secs(20)).unwrap();
            guard.expect("the waiter's turn came").unlock().unwrap();
        }));
        assert!(
            eventually(Duration::from_secs(5), || {
                queue
                    .llen::<_, usize>("redisson_lock_queue:{fair}")
                    .unwrap()
                    == index + 1
            }),
            "waiter {index} did not queue"
        );
    }

    let report = json(&tool(&redis.url(), &["--json", "inspect", "fair"], ""));
    assert_eq!(report["kind"], "fair_lock");
    assert_eq!(report["holders"][0]["client_id"], holder.client_id());
    assert_eq!(report["queue"]["length"], 2);
    let queued: Vec<&str> = report["queue"]["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|waiter| waiter["client_id"].as_str().unwrap())
        .collect();
    assert_eq!(queued, [waiters[0].client_id(), waiters[1].client_id()]);
    assert!(
        report["queue"]["waiters"][0]["place_expires_in_ms"]
            .as_i64()
            .unwrap()
            > 0
    );
    let text = tool(&redis.url(), &["inspect", "fair"], "");
    let first = text
        .stdout
        .find(&format!("1. client {}", waiters[0].client_id()));
    let second = text
        .stdout
        .find(&format!("2. client {}", waiters[1].client_id()));
    assert!(first.is_some() && second > first, "{}", text.stdout);

    guard.unlock().unwrap();
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn missing_names_and_unreachable_servers_have_their_exit_codes() {
    let mut redis = server();
    let url = redis.url();
    let missing = tool(&url, &["inspect", "nothing-here"], "");
    assert_eq!(missing.code, 1);
    assert!(missing.stderr.contains("nothing on"), "{}", missing.stderr);
    assert_eq!(
        tool(&url, &["break-lock", "nothing-here", "--yes"], "").code,
        1
    );
    assert_eq!(tool("nope://x", &["inspect", "job"], "").code, 2);
    redis.kill().unwrap();
    let unreachable = tool(&url, &["inspect", "job"], "");
    assert_eq!(unreachable.code, 2);
    assert!(
        unreachable.stderr.contains("cannot connect"),
        "{}",
        unreachable.stderr
    );
}

/// A lock `name` held through `manager` by a thread of this process until `release` is
/// dropped; answers the guard's holder id once it holds.
fn hold(
    manager: &LockManager,
    name: &str,
) -> (
    String,
    crossbeam_channel::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let lock = manager.lock(name);
    let (release, released) = crossbeam_channel::bounded::<()>(0);
    let (held, holder) = crossbeam_channel::bounded(1);
    let thread = std::thread::spawn(move || {
        let guard = lock.lock().unwrap();
        held.send(guard.holder_id().to_owned()).unwrap();
        let _ = released.recv();
        drop(guard);
    });
    let holder = holder
        .recv_timeout(TOOL_DEADLINE)
        .expect("the lock was taken");
    (holder, release, thread)
}

#[test]
fn the_tool_speaks_tls_with_the_ca_it_is_given() {
    let files = redlease_testing::TlsFiles::generate().expect("openssl");
    let redis = match RedisServer::start_tls(&files, &Default::default()) {
        Ok(redis) => redis,
        // The Valkey build the suite runs a second time against has no TLS (as tls.rs, which
        // that run leaves out).
        Err(err) if std::env::var_os("REDLEASE_REDIS_SERVER").is_some() => {
            return eprintln!("skipped: this server build cannot run TLS: {err}");
        }
        Err(err) => panic!("a TLS-only redis-server: {err}"),
    };
    let ca = std::fs::read(files.ca_certificate()).unwrap();
    let manager = LockManager::builder(redis.url())
        .tls_ca_certificate(&ca)
        .build()
        .unwrap();
    let (holder, release, thread) = hold(&manager, "job");
    let url = redis.url();
    let ca_path = files.ca_certificate();
    let ca_path = ca_path.to_str().unwrap();

    let report = json(&tool_with(
        &[
            "--url", &url, "--tls-ca", ca_path, "--json", "inspect", "job",
        ],
        "",
    ));
    assert_eq!(report["holders"][0]["id"], holder.as_str());
    let listing = json(&tool_with(
        &["--url", &url, "--tls-ca", ca_path, "--json", "list", "*"],
        "",
    ));
    assert_eq!(listing["locks"][0]["name"], "job");
    // Without the CA the server's certificate is not trusted; with --tls-insecure it is not
    // checked.
    let refused = tool_with(&["--url", &url, "inspect", "job"], "");
    assert_eq!(refused.code, 2, "stdout: {}", refused.stdout);
    let unchecked = json(&tool_with(
        &["--url", &url, "--tls-insecure", "--json", "inspect", "job"],
        "",
    ));
    assert_eq!(unchecked["holders"][0]["id"], holder.as_str());
    // A force release goes through the library, with the same TLS options.
    let freed = json(&tool_with(
        &[
            "--url",
            &url,
            "--tls-ca",
            ca_path,
            "--json",
            "break-lock",
            "job",
            "--yes",
        ],
        "",
    ));
    assert_eq!(freed["freed"], true);
    drop(release);
    thread.join().unwrap();
}

#[test]
fn the_tool_asks_the_sentinels_for_the_master() {
    let master = server();
    let sentinel = sentinel::Sentinel::start(master.port()).expect("redis-sentinel");
    let manager = manager(&master, Duration::from_secs(5));
    let (holder, release, thread) = hold(&manager, "job");
    let sentinel_url = sentinel.url();
    let asked = [
        "--sentinel",
        sentinel_url.as_str(),
        "--master",
        sentinel::MASTER_NAME,
    ];
    let mut inspect = asked.to_vec();
    inspect.extend(["--json", "inspect", "job"]);
    let report = json(&tool_with(&inspect, ""));
    assert_eq!(report["holders"][0]["id"], holder.as_str());
    let mut force = asked.to_vec();
    force.extend(["--json", "break-lock", "job", "--yes"]);
    assert_eq!(json(&tool_with(&force, ""))["freed"], true);
    let mut unknown = vec!["--sentinel", sentinel_url.as_str(), "--master", "nobody"];
    unknown.extend(["inspect", "job"]);
    let refused = tool_with(&unknown, "");
    assert_eq!(refused.code, 2, "stdout: {}", refused.stdout);
    assert!(refused.stderr.contains("nobody"), "{}", refused.stderr);
    drop(release);
    thread.join().unwrap();
}

#[test]
fn on_a_cluster_list_scans_every_master_and_inspect_finds_the_name_slot() {
    let cluster = redlease_testing::RedisCluster::start(3, 0).expect("a Redis Cluster");
    let seeds = cluster.seed_urls();
    let manager = LockManager::builder_cluster(seeds.iter().map(String::as_str))
        .build()
        .unwrap();
    // A name on each master.
    let mut names: Vec<String> = Vec::new();
    let mut owners = Vec::new();
    for index in 0.. {
        let name = format!("job-{index}");
        let owner = cluster.master_of_key(&name).unwrap().port();
        if !owners.contains(&owner) {
            owners.push(owner);
            names.push(name);
        }
        if owners.len() == 3 {
            break;
        }
    }
    let holds: Vec<_> = names.iter().map(|name| hold(&manager, name)).collect();
    // One seed is enough to find every master.
    let listing = json(&tool_with(
        &["--cluster", "--url", &seeds[0], "--json", "list", "job-*"],
        "",
    ));
    let listed: Vec<(String, String)> = listing["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| {
            let name = lock["name"].as_str().unwrap().to_owned();
            (name, lock["holders"][0]["id"].as_str().unwrap().to_owned())
        })
        .collect();
    let mut expected: Vec<(String, String)> = names
        .iter()
        .cloned()
        .zip(holds.iter().map(|(holder, ..)| holder.clone()))
        .collect();
    expected.sort();
    assert_eq!(listed, expected, "each lock once, with its holder");
    for (name, holder) in &expected {
        let report = json(&tool_with(
            &["--cluster", "--url", &seeds[0], "--json", "inspect", name],
            "",
        ));
        assert_eq!(report["holders"][0]["id"], holder.as_str(), "{name}");
    }
    // A waiter of a Redis 7 cluster listens on a shard channel (SSUBSCRIBE): it is counted.
    let waiting = LockManager::builder_cluster(seeds.iter().map(String::as_str))
        .build()
        .unwrap();
    let contended = names[0].clone();
    let waiter = std::thread::spawn(move || {
        let lock = waiting.lock(&contended);
        lock.lock().unwrap().unlock().unwrap();
    });
    let args = [
        "--cluster",
        "--url",
        &seeds[0],
        "--json",
        "inspect",
        &names[0],
    ];
    assert!(
        eventually(TOOL_DEADLINE, || {
            json(&tool_with(&args, ""))["subscribers"].as_u64() >= Some(1)
        }),
        "the waiter is not counted"
    );
    for (_, release, thread) in holds {
        drop(release);
        thread.join().unwrap();
    }
    waiter.join().unwrap();
}

#[test]
fn watch_sees_a_handoff() {
    let redis = server();
    let first = manager(&redis, Duration::from_secs(5));
    let second = manager(&redis, Duration::from_secs(5));
    let (first_holder, release_first, first_thread) = hold(&first, "job");
    let url = redis.url();
    let mut command = tool_command(&[
        "--url",
        &url,
        "--json",
        "watch",
        "job",
        "--interval",
        "0.05",
    ]);
    let mut watcher = KillOnDrop::spawn(&mut command);
    let changes = lines_of(watcher.stdout.take().unwrap());
    let holder_of = |line: &str| -> Option<String> {
        let report: serde_json::Value = serde_json::from_str(line).unwrap();
        report["holders"][0]["id"].as_str().map(str::to_owned)
    };
    let next = |changes: &crossbeam_channel::Receiver<String>| {
        changes
            .recv_timeout(TOOL_DEADLINE)
            .expect("watch printed a change")
    };
    assert_eq!(holder_of(&next(&changes)), Some(first_holder.clone()));
    // The second waits, and takes the lock when the first lets go; it holds it until the
    // watcher has shown it.
    let (shown, until_shown) = crossbeam_channel::bounded::<()>(0);
    let (took, second_took) = crossbeam_channel::bounded(1);
    let waiter = std::thread::spawn(move || {
        let guard = second.lock("job").lock().unwrap();
        took.send(guard.holder_id().to_owned()).unwrap();
        let _ = until_shown.recv();
    });
    let mut raw = redis::Client::open(redis.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    assert!(
        eventually(TOOL_DEADLINE, || someone_waits(&mut raw)),
        "the second never waited"
    );
    drop(release_first);
    first_thread.join().unwrap();
    let second_holder = second_took.recv_timeout(TOOL_DEADLINE).unwrap();
    // Every change shown until then names the first holder (its waiters changed), nobody
    // (between the two holds), or the second: never anyone else, and the second at last.
    loop {
        let holder = holder_of(&next(&changes));
        if holder.as_deref() == Some(second_holder.as_str()) {
            break;
        }
        assert!(
            holder.is_none() || holder == Some(first_holder.clone()),
            "{holder:?}"
        );
    }
    drop(shown);
    waiter.join().unwrap();
}

/// Whether a thread waits on the lock "job": its release channel has a listener.
fn someone_waits(redis: &mut redis::Connection) -> bool {
    let listeners: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("redisson_lock__channel:{job}")
        .query(redis)
        .unwrap();
    listeners.iter().any(|(_, count)| *count > 0)
}

/// The lines a child prints, as they come.
fn lines_of(stdout: ChildStdout) -> crossbeam_channel::Receiver<String> {
    let (send, lines) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if send.send(line).is_err() {
                return;
            }
        }
    });
    lines
}

#[test]
fn inspect_shows_the_leader_of_an_election_and_the_upgradable_reader() {
    let redis = server();
    let manager = manager(&redis, Duration::from_secs(30));
    let leading = manager
        .leader_election("cron")
        .candidate("host-a:9000")
        .lock()
        .unwrap();
    let text = tool(&redis.url(), &["inspect", "cron"], "");
    assert_eq!(text.code, 0, "stderr: {}", text.stderr);
    let leader_line = format!("host-a:9000  term {}", leading.term());
    assert!(text.stdout.contains(&leader_line), "{}", text.stdout);
    let report = json(&tool(&redis.url(), &["--json", "inspect", "cron"], ""));
    assert_eq!(report["leader"]["value"], "host-a:9000");
    assert_eq!(report["leader"]["holder_id"], leading.holder_id());
    drop(leading);

    let rw = manager.read_write_lock("config");
    let upgradable = rw.upgradable().lock().unwrap();
    let text = tool(&redis.url(), &["inspect", "config"], "");
    assert_eq!(text.code, 0, "stderr: {}", text.stderr);
    assert!(
        text.stdout.contains("  upgradable reader  "),
        "{}",
        text.stdout
    );
    let listing = tool(&redis.url(), &["list", "conf*"], "");
    assert!(listing.stdout.contains(" upgradable"), "{}", listing.stdout);
    let report = json(&tool(&redis.url(), &["--json", "inspect", "config"], ""));
    assert_eq!(report["holders"][0]["role"], "upgradable");
    assert_eq!(report["holders"][0]["id"], upgradable.holder_id());
    assert_eq!(
        report["holders"][0]["read_level_leases_ms"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Upgraded: the writer first, and its upgradable read after it.
    let writing = upgradable.upgrade().unwrap();
    let report = json(&tool(&redis.url(), &["--json", "inspect", "config"], ""));
    assert_eq!(report["mode"], "write");
    assert_eq!(report["holders"][0]["role"], "writer");
    assert_eq!(report["holders"][1]["role"], "upgradable");
    drop(writing);
}

/// `doctor` reads the settings that put locks at risk: nothing on a plain server, the missing
/// replicas it is told to expect, an evicting policy (with its fix, in JSON); it exits with 1
/// when it found something.
#[test]
fn doctor_tells_what_puts_locks_at_risk_and_how_to_fix_it() {
    let clean = server();
    let run = tool(&clean.url(), &["doctor"], "");
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    assert!(run.stdout.contains("nothing found"), "{}", run.stdout);
    let run = tool(&clean.url(), &["doctor", "--replicas", "1"], "");
    assert_eq!(run.code, 1, "stderr: {}", run.stderr);
    assert!(
        run.stdout.contains("0 replicas in sync, 1 asked for"),
        "{}",
        run.stdout
    );
    let evicting =
        RedisServer::start_with_args(&["--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru"])
            .expect("redis-server");
    let run = tool(&evicting.url(), &["--json", "doctor"], "");
    assert_eq!(run.code, 1, "stderr: {}", run.stderr);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let finding = &report["findings"][0];
    assert_eq!(finding["kind"], "eviction");
    assert!(finding["found"]
        .as_str()
        .unwrap()
        .contains("maxmemory_policy allkeys-lru"));
    assert!(finding["fix"].as_str().unwrap().contains("noeviction"));
}

/// `top` shows the held locks with the most waiters first, and two processes (managers)
/// each waiting in the queue of a fair lock the other holds as a cycle.
#[test]
fn top_shows_the_most_waited_for_locks_and_a_cycle_of_fair_waits() {
    let redis = server();
    let (a, b) = (
        manager_for_url(&redis.url(), Duration::from_secs(30)),
        manager_for_url(&redis.url(), Duration::from_secs(30)),
    );
    let (x_held, y_held) = (
        a.fair_lock("x").lock().unwrap(),
        b.fair_lock("y").lock().unwrap(),
    );
    let busy = a.lock("busy").lock().unwrap();
    let waiter = |manager: &LockManager, lock: Lock| {
        let manager = manager.clone();
        std::thread::spawn(move || {
            let taken = lock.try_lock_for(TOOL_DEADLINE * 2).unwrap();
            drop(taken);
            drop(manager);
        })
    };
    let waiters = [
        waiter(&a, a.fair_lock("y")),
        waiter(&b, b.fair_lock("x")),
        waiter(&b, b.lock("busy")),
    ];
    assert!(eventually(TOOL_DEADLINE, || a.stats().waiting == 1
        && b.stats().waiting == 2));
    let report = json(&tool(&redis.url(), &["--json", "top"], ""));
    let locks = report["locks"].as_array().unwrap();
    let names: Vec<&str> = locks
        .iter()
        .map(|lock| lock["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["busy", "x", "y"], "{report}");
    assert_eq!(locks[0]["listening"], 1);
    assert_eq!(locks[1]["queued"], 1);
    let mut clients = vec![a.client_id().to_owned(), b.client_id().to_owned()];
    clients.sort();
    assert_eq!(report["cycles"][0]["clients"], serde_json::json!(clients));
    assert_eq!(report["cycles"][0]["locks"], serde_json::json!(["x", "y"]));
    let text = tool(&redis.url(), &["top"], "");
    assert_eq!(text.code, 0, "stderr: {}", text.stderr);
    assert!(text.stdout.contains("cycle: processes"), "{}", text.stdout);
    drop((x_held, y_held, busy));
    for waiter in waiters {
        waiter.join().unwrap();
    }
}
