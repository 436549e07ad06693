//! TLS against real TLS-only `redis-server` processes (`--port 0 --tls-port N`) with
//! certificates made by `openssl`: locks, waits woken over the TLS pub/sub connection, the
//! watchdog, a Redlock over two TLS servers, mutual TLS, and every refusal as a typed error.
#![cfg(feature = "tls")]

use crate::common;

use std::time::{Duration, Instant};

use common::eventually;
use redlease::{Error, LockManager, LockManagerBuilder, RedLock, TlsFailure};
use redlease_testing::{RedisServer, TlsFiles, TlsServerOptions};

/// Every connection attempt of these tests is local: a refusal comes at once.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

fn files() -> TlsFiles {
    TlsFiles::generate().expect("generate certificates (install openssl)")
}

fn tls_server(files: &TlsFiles, options: &TlsServerOptions) -> RedisServer {
    RedisServer::start_tls(files, options).expect("start a TLS-only redis-server")
}

fn read(path: std::path::PathBuf) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

/// A builder for `url` with short timeouts.
fn builder(url: &str) -> LockManagerBuilder {
    LockManager::builder(url)
        .connect_timeout(CONNECT_TIMEOUT)
        .response_timeout(Duration::from_secs(2))
}

/// A builder for `url` that trusts the test CA.
fn trusting_builder(url: &str, files: &TlsFiles) -> LockManagerBuilder {
    builder(url).tls_ca_certificate(read(files.ca_certificate()))
}

/// The TLS failure of `outcome`, or a panic that shows what it was instead.
fn tls_failure(outcome: redlease::Result<LockManager>) -> (TlsFailure, String) {
    match outcome {
        Err(Error::Tls { kind, detail }) => {
            println!("refused as {kind:?}: {detail}");
            (kind, detail)
        }
        Err(other) => panic!("expected a TLS error, got {other:?}"),
        Ok(_) => panic!("expected a TLS error, the manager was built"),
    }
}

#[test]
fn lock_and_unlock_over_tls_by_host_name_and_by_ip() {
    let files = files();
    let server = tls_server(&files, &TlsServerOptions::default());
    let by_name = format!("rediss://localhost:{}/", server.port());
    let by_ip = format!("rediss://127.0.0.1:{}/", server.port());
    for url in [by_name, by_ip] {
        let manager = trusting_builder(&url, &files).build().expect(&url);
        let lock = manager.lock("tls:resource");
        let guard = lock.try_lock().unwrap().expect("the lock is free");
        assert!(lock.is_locked().unwrap());
        assert!(server
            .command(&["EXISTS", "tls:resource"])
            .unwrap()
            .starts_with(":1"));
        guard.unlock().unwrap();
        assert!(!lock.is_locked().unwrap());
        manager.shutdown();
    }
}

/// `holder` takes `name`, `waiter` waits for it on another thread, and the release wakes
/// it: well before the 30 s lease (the default watchdog timeout) that is the waiter's only
/// other way out.
fn assert_release_wakes_the_waiter(holder: &LockManager, waiter: &LockManager, name: &str) {
    let guard = holder.lock(name).lock().unwrap();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let guard = waiter.lock(name).lock().unwrap();
            let woken_at = Instant::now();
            guard.unlock().unwrap();
            woken_at
        });
        assert!(
            eventually(Duration::from_secs(5), || waiter.stats().waiting == 1
                && waiter.subscribed_channels() == 1),
            "the waiter did not start waiting"
        );
        let released_at = Instant::now();
        guard.unlock().unwrap();
        let woken_at = waiting.join().unwrap();
        let took = woken_at - released_at;
        println!("woken {took:?} after the release");
        assert!(took < Duration::from_secs(5), "woken only after {took:?}");
    });
}

#[test]
fn a_waiter_is_woken_over_the_tls_pubsub_connection() {
    let files = files();
    let server = tls_server(&files, &TlsServerOptions::default());
    let holder = trusting_builder(&server.url(), &files).build().unwrap();
    let waiter = trusting_builder(&server.url(), &files).build().unwrap();
    assert_release_wakes_the_waiter(&holder, &waiter, "tls:wake");
    assert_eq!(waiter.stats().pubsub_reconnects, 0);
}

#[test]
fn the_tls_pubsub_connection_comes_back_after_a_restart() {
    let files = files();
    let mut server = tls_server(&files, &TlsServerOptions::default());
    let holder = trusting_builder(&server.url(), &files).build().unwrap();
    let waiter = trusting_builder(&server.url(), &files).build().unwrap();
    server.restart().expect("restart the TLS server");
    assert!(
        eventually(Duration::from_secs(5), || waiter.stats().pubsub_reconnects
            >= 1),
        "the pub/sub connection did not come back"
    );
    assert_release_wakes_the_waiter(&holder, &waiter, "tls:after-restart");
}

#[test]
fn a_frozen_tls_server_is_a_timeout_within_the_call_bounds() {
    let files = files();
    let server = tls_server(&files, &TlsServerOptions::default());
    let (connect_timeout, response_timeout) =
        (Duration::from_millis(400), Duration::from_millis(400));
    // No idle connections: the call connects, and the frozen server never completes the
    // handshake.
    let manager = trusting_builder(&server.url(), &files)
        .connect_timeout(connect_timeout)
        .response_timeout(response_timeout)
        .max_idle_connections(0)
        .build()
        .unwrap();
    server.pause().unwrap();
    let started = Instant::now();
    let outcome = manager.lock("tls:frozen").try_lock();
    let took = started.elapsed();
    server.resume().unwrap();
    println!("frozen server: {outcome:?} after {took:?}");
    assert!(matches!(outcome, Err(Error::Timeout(_))), "{outcome:?}");
    assert!(
        took < connect_timeout + response_timeout + Duration::from_millis(300),
        "{took:?}"
    );
}

#[test]
fn a_password_is_sent_over_tls_on_both_kinds_of_connection() {
    let files = files();
    let server = tls_server(&files, &TlsServerOptions::default());
    let reply = server
        .command(&["CONFIG", "SET", "requirepass", "tls-secret"])
        .unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
    // With AUTH to send, redis-rs runs the handshake while setting the connection up; the
    // pub/sub connection sends AUTH over its own TLS session.
    let url = format!("rediss://:tls-secret@localhost:{}/", server.port());
    let holder = trusting_builder(&url, &files).build().unwrap();
    let waiter = trusting_builder(&url, &files).build().unwrap();
    assert_release_wakes_the_waiter(&holder, &waiter, "tls:password");
    assert_eq!(waiter.stats().pubsub_reconnects, 0);
}

#[test]
fn the_watchdog_renews_over_tls() {
    let files = files();
    let server = tls_server(&files, &TlsServerOptions::default());
    let watchdog = Duration::from_millis(600);
    let manager = trusting_builder(&server.url(), &files)
        .watchdog_timeout(watchdog)
        .build()
        .unwrap();
    let guard = manager.lock("tls:renewed").lock().unwrap();
    let taken_at = Instant::now();
    // Three leases' worth of time, which only renewals (every 200 ms) can bridge.
    assert!(eventually(Duration::from_secs(10), || {
        taken_at.elapsed() >= watchdog * 3 && manager.stats().renewals_sent >= 6
    }));
    guard.check().expect("the lock is still held");
    let other = trusting_builder(&server.url(), &files).build().unwrap();
    assert!(other.lock("tls:renewed").is_locked().unwrap());
    assert_eq!(manager.stats().renewals_failed, 0);
    guard.unlock().unwrap();
}

#[test]
fn a_redlock_over_two_tls_servers() {
    let files = files();
    let servers = RedisServer::start_tls_many(2, &files, &TlsServerOptions::default())
        .expect("start two TLS-only servers");
    let managers: Vec<LockManager> = servers
        .iter()
        .map(|server| trusting_builder(&server.url(), &files).build().unwrap())
        .collect();
    let redlock = RedLock::from_managers(&managers, "tls:redlock").unwrap();
    for _ in 0..3 {
        let guard = redlock.try_lock().unwrap().expect("the lock is free");
        for server in &servers {
            let exists = server.command(&["EXISTS", "tls:redlock"]).unwrap();
            assert!(exists.starts_with(":1"), "{exists}");
        }
        guard.unlock().unwrap();
    }
    for server in &servers {
        assert!(server
            .command(&["EXISTS", "tls:redlock"])
            .unwrap()
            .starts_with(":0"));
    }
}

#[test]
fn mutual_tls_with_the_client_certificate_and_refusals_without_it() {
    let files = files();
    let options = TlsServerOptions::default().require_client_certificates();
    let server = tls_server(&files, &options);
    let url = server.url();

    let manager = trusting_builder(&url, &files)
        .tls_client_certificate(read(files.client_certificate()), read(files.client_key()))
        .build()
        .expect("a client certificate of the server's CA is accepted");
    let guard = manager.lock("tls:mutual").lock().unwrap();
    guard.unlock().unwrap();
    // The subscribed connection shows the certificate too.
    let subscription_made = manager.lock("tls:mutual-wait");
    let held = subscription_made.lock().unwrap();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| manager.lock("tls:mutual-wait").lock().map(drop));
        assert!(eventually(Duration::from_secs(5), || manager
            .subscribed_channels()
            == 1));
        held.unlock().unwrap();
        waiting.join().unwrap().unwrap();
    });
    assert_eq!(manager.stats().pubsub_reconnects, 0);

    let (kind, _) = tls_failure(trusting_builder(&url, &files).build());
    assert_eq!(kind, TlsFailure::ClientCertificateRequired);

    let (kind, _) = tls_failure(
        trusting_builder(&url, &files)
            .tls_client_certificate(
                read(files.other_client_certificate()),
                read(files.other_client_key()),
            )
            .build(),
    );
    assert_eq!(kind, TlsFailure::ClientCertificateRejected);
}

#[test]
fn a_server_certificate_of_another_ca_is_an_unknown_issuer() {
    let files = files();
    let server = tls_server(&files, &TlsServerOptions::default());
    let (kind, _) = tls_failure(
        builder(&server.url())
            .tls_ca_certificate(read(files.other_ca_certificate()))
            .build(),
    );
    assert_eq!(kind, TlsFailure::UnknownIssuer);
    // Without a CA, against the system's roots.
    let (kind, _) = tls_failure(builder(&server.url()).build());
    assert_eq!(kind, TlsFailure::UnknownIssuer);
}

#[test]
fn a_certificate_for_another_host_name_is_a_mismatch() {
    let files = files();
    let server = tls_server(
        &files,
        &TlsServerOptions::default().wrong_name_certificate(),
    );
    for url in [
        server.url(),
        format!("rediss://127.0.0.1:{}/", server.port()),
    ] {
        let (kind, _) = tls_failure(trusting_builder(&url, &files).build());
        assert_eq!(kind, TlsFailure::HostNameMismatch, "{url}");
    }
}

#[test]
fn a_plaintext_url_to_a_tls_only_server_is_told() {
    let files = files();
    let server = tls_server(&files, &TlsServerOptions::default());
    let plaintext = format!("redis://127.0.0.1:{}/", server.port());
    let started = Instant::now();
    let (kind, _) = tls_failure(builder(&plaintext).build());
    assert_eq!(kind, TlsFailure::ServerRequiresTls);
    assert!(
        started.elapsed() < CONNECT_TIMEOUT,
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_tls_url_to_a_plaintext_server_is_told() {
    let files = files();
    let plaintext = common::server();
    let url = format!("rediss://localhost:{}/", plaintext.port());
    // A plaintext redis-server stays silent through the handshake: telling takes the connect
    // timeout, and a plaintext PING after it.
    let connect_timeout = Duration::from_millis(500);
    let started = Instant::now();
    let (kind, _) = tls_failure(
        trusting_builder(&url, &files)
            .connect_timeout(connect_timeout)
            .build(),
    );
    assert_eq!(kind, TlsFailure::NotTls);
    assert!(
        started.elapsed() < connect_timeout * 3,
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_explicit_insecure_option_connects_despite_an_untrusted_certificate() {
    let files = files();
    let server = tls_server(
        &files,
        &TlsServerOptions::default().wrong_name_certificate(),
    );
    let manager = builder(&server.url())
        .tls_ca_certificate(read(files.other_ca_certificate()))
        .tls_danger_accept_invalid_certificates()
        .build()
        .expect("verification is skipped");
    let guard = manager.lock("tls:insecure").lock().unwrap();
    guard.unlock().unwrap();
    assert!(eventually(Duration::from_secs(5), || manager
        .stats()
        .pubsub_reconnects
        == 0
        && manager.subscribed_channels() == 0));
}

#[test]
fn a_later_connection_to_a_changed_certificate_is_a_typed_error() {
    let files = files();
    let server = tls_server(&files, &TlsServerOptions::default());
    // No idle connections: every call makes a new one.
    let manager = trusting_builder(&server.url(), &files)
        .max_idle_connections(0)
        .build()
        .unwrap();
    manager.lock("tls:later").with_lock(|_| ()).unwrap();
    let certificate = files.wrong_name_certificate();
    let key = files.wrong_name_key();
    let reply = server
        .command(&[
            "CONFIG",
            "SET",
            "tls-cert-file",
            &certificate.to_string_lossy(),
            "tls-key-file",
            &key.to_string_lossy(),
        ])
        .unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
    match manager.lock("tls:later").try_lock() {
        Err(Error::Tls { kind, detail }) => {
            println!("later call refused as {kind:?}: {detail}");
            assert_eq!(kind, TlsFailure::HostNameMismatch);
        }
        other => panic!("expected a host name mismatch, got {other:?}"),
    }
}

#[test]
fn tls_options_are_checked_at_build() {
    let files = files();
    let plaintext = common::server();
    let invalid = |outcome: redlease::Result<LockManager>| match outcome {
        Err(Error::InvalidArgument(message)) => message,
        other => panic!("expected an invalid argument, got {other:?}"),
    };
    // An option with a plaintext URL.
    let message = invalid(
        builder(&plaintext.url())
            .tls_ca_certificate(read(files.ca_certificate()))
            .build(),
    );
    assert!(message.contains("rediss://"), "{message}");
    invalid(
        builder(&plaintext.url())
            .tls_danger_accept_invalid_certificates()
            .build(),
    );
    // Bad PEM, before any connection is tried.
    let tls_url = format!("rediss://localhost:{}/", plaintext.port());
    invalid(
        builder(&tls_url)
            .tls_ca_certificate("not a certificate")
            .build(),
    );
    invalid(
        builder(&tls_url)
            .tls_client_certificate(read(files.client_certificate()), "no key here")
            .build(),
    );
    invalid(
        builder(&tls_url)
            .tls_client_certificate(read(files.client_certificate()), read(files.server_key()))
            .build(),
    );
    // The URL's own way to skip verification.
    let message = invalid(builder(&format!("{tls_url}#insecure")).build());
    assert!(
        message.contains("tls_danger_accept_invalid_certificates"),
        "{message}"
    );
}
