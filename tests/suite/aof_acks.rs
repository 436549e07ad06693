//! Acknowledgements on disk (`aof_acks`, `WAITAOF`): refused at build by a server without the
//! command (Redis before 7.2) and by a master without an append-only file when its own fsync
//! is asked for, each with a typed error; accepted where supported, where every write waits
//! for the master's and a replica's fsync, and a shortfall gives an acquisition back.
//!
//! The servers with `WAITAOF` are the fixtures' own when they have it, else the build named
//! by `REDLEASE_WAITAOF_SERVER` (the test script sets it to Valkey); a test without one prints
//! why and has nothing to run. So does the refusal test without a server that lacks it.

use crate::common;

use std::ffi::OsString;
use std::time::Duration;

use common::eventually;
use redlease::{Error, LockManager, Writes};
use redlease_testing::{has_waitaof, server_with_waitaof, waitaof_program, RedisServer};

const PATIENCE: Duration = Duration::from_secs(10);

/// A server program without `WAITAOF`: the fixtures' own, or `redis-server` from `PATH`.
fn program_without_waitaof() -> Option<OsString> {
    [redlease_testing::server_program(), "redis-server".into()]
        .into_iter()
        .find(|program| has_waitaof(program) == Some(false))
}

fn aof_manager(url: String, replicas: u32, timeout: Duration) -> redlease::Result<LockManager> {
    LockManager::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .aof_acks(true, replicas, timeout)
        .build()
}

#[test]
fn a_server_without_waitaof_is_refused_at_build() {
    let Some(program) = program_without_waitaof() else {
        eprintln!("skipped: no server without WAITAOF (Redis before 7.2) at hand");
        return;
    };
    let redis = RedisServer::start_program(&program, &["--appendonly", "yes"]).unwrap();
    for local in [true, false] {
        let built = LockManager::builder(redis.url())
            .aof_acks(local, 1, Duration::from_millis(500))
            .build();
        match built {
            Err(Error::Unsupported { feature, detail }) => {
                assert!(feature.contains("WAITAOF"), "{feature}");
                assert!(
                    detail.to_lowercase().contains("unknown command"),
                    "{detail}"
                );
            }
            other => panic!("{program:?}: {:?}", other.map(|_| "built")),
        }
    }
    // The same server with WAIT is fine.
    LockManager::builder(redis.url())
        .replica_acks(1, Duration::from_millis(500))
        .build()
        .unwrap();
}

#[test]
fn a_master_without_an_append_only_file_is_refused_for_local_fsync() {
    let program = match waitaof_program() {
        Ok(program) => program,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let redis = RedisServer::start_program(&program, &[]).unwrap(); // appendonly no
    match aof_manager(redis.url(), 0, Duration::from_millis(500)) {
        Err(Error::Unsupported { detail, .. }) => {
            assert!(detail.contains("appendonly"), "{detail}")
        }
        other => panic!("{:?}", other.map(|_| "built")),
    }
}

#[test]
fn conflicting_or_empty_settings_are_refused_before_connecting() {
    let unreachable = "redis://127.0.0.1:1/";
    let both = LockManager::builder(unreachable)
        .replica_acks(1, Duration::from_millis(500))
        .aof_acks(true, 1, Duration::from_millis(500))
        .build();
    assert!(matches!(both, Err(Error::InvalidArgument(_))), "{both:?}");
    let nothing = LockManager::builder(unreachable)
        .aof_acks(false, 0, Duration::from_millis(500))
        .build();
    assert!(
        matches!(nothing, Err(Error::InvalidArgument(_))),
        "{nothing:?}"
    );
}

#[test]
fn writes_wait_for_the_disks_of_the_master_and_a_replica() {
    let Some(pair) = server_with_waitaof() else {
        return;
    };
    let (master, replica) = pair.unwrap();
    let manager = aof_manager(master.url(), 1, Duration::from_secs(2)).unwrap();
    let guard = manager.lock("aof:lock").lock().unwrap();
    assert_eq!(guard.replicas_acknowledged(), Some(1));
    assert_eq!(
        replica.command(&["EXISTS", "aof:lock"]).unwrap(),
        ":1\r\n",
        "the replica has it"
    );
    let mut status = Writes::new();
    status.set("{aof:lock}:status", "on disk");
    guard.guarded_write(&status).unwrap();
    guard.unlock().unwrap();
    let stats = master.command(&["INFO", "commandstats"]).unwrap();
    // The probe at build, then the acquisition, the guarded write and the release.
    let calls = stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_waitaof:calls="))
        .and_then(|rest| rest.split(',').next()?.parse::<u32>().ok());
    assert!(calls >= Some(4), "{stats}");
    assert_eq!(manager.stats().releases_unreplicated, 0);
}

#[test]
fn an_acquisition_short_of_disks_is_given_back_and_told() {
    let Some(pair) = server_with_waitaof() else {
        return;
    };
    let (master, _replica) = pair.unwrap();
    // Two replicas' fsyncs asked for, one replica there.
    let manager = aof_manager(master.url(), 2, Duration::from_millis(300)).unwrap();
    match manager.lock("aof:short").try_lock() {
        Err(Error::NotPersisted {
            name,
            on_master_disk,
            acknowledged,
            required,
        }) => {
            assert_eq!(name, "aof:short");
            assert!(on_master_disk);
            assert!(acknowledged <= 1, "one replica there: {acknowledged}");
            assert_eq!(required, 2);
        }
        other => panic!("{:?}", other.map(|guard| guard.is_some())),
    }
    assert!(
        eventually(PATIENCE, || {
            master.command(&["EXISTS", "aof:short"]).unwrap() == ":0\r\n"
        }),
        "the grant was given back"
    );
}
