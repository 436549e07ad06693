//! The `redlease-inspect` tool, run as a process against a throwaway server on which another
//! process holds a lock: it shows the holder and its lease (as text and JSON), lists the
//! lock, frees it by force so that the holder's guard hears it, leaves it alone when the
//! operator says no, and shows a fair lock's waiters in order.
//!
//! Built only with the `inspect` feature, which the tool needs:
//! `cargo test --features inspect --test inspect`.
#![cfg(feature = "inspect")]

mod common;

use std::io::{BufReader, Read, Write};
use std::process::{ChildStdout, Command, Stdio};
use std::time::Duration;

use common::{
    child_role, env, eventually, line_with, manager, manager_for_url, server, spawn_child,
    KillOnDrop, RedisServer, CHILD_DEADLINE,
};
use redis::Commands;
use redlease::LockManager;

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
    let mut command = Command::new(env!("CARGO_BIN_EXE_redlease-inspect"));
    command
        .args(["--url", server_url])
        .args(["--connect-timeout", "2", "--response-timeout", "2"])
        .args(args)
        .env_remove("REDLEASE_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
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
    let mut child = spawn_child("holder_child", "holder", &[(URL, server.url())]);
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
fn force_unlock_frees_the_lock_and_the_holder_hears_it() {
    let redis = server();
    let (_child, mut output, client_id) = job_held_elsewhere(&redis);

    let freed = json(&tool(
        &redis.url(),
        &["--json", "force-unlock", "job", "--yes"],
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
fn force_unlock_answered_no_leaves_the_lock_held() {
    let redis = server();
    let (_child, _output, client_id) = job_held_elsewhere(&redis);

    let declined = tool(&redis.url(), &["force-unlock", "job"], "n\n");
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
    assert_eq!(tool(&redis.url(), &["force-unlock", "job"], "").code, 1);
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
        tool(&url, &["force-unlock", "nothing-here", "--yes"], "").code,
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
