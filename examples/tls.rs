//! Over TLS: a manager that checks the server's certificate against a CA of its own, and
//! one without that CA, refused with the reason.
//!
//! `cargo run --example tls`: it makes a throwaway CA and certificates with `openssl` and
//! starts a TLS-only `redis-server` with them.

use redlease::{Error, LockManager};
use redlease_testing::{RedisServer, TlsFiles, TlsServerOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = TlsFiles::generate()?;
    let redis = RedisServer::start_tls(&files, &TlsServerOptions::default())?;
    println!("a TLS-only redis-server at {}", redis.url());

    let ca = std::fs::read(files.ca_certificate())?;
    let manager = LockManager::builder(redis.url())
        .tls_ca_certificate(ca)
        .build()?;
    let guard = manager.lock("example:secure").lock()?;
    println!("locked over TLS: token {}", guard.fencing_token());
    guard.unlock()?;

    match LockManager::builder(redis.url()).build() {
        Err(Error::Tls { kind, .. }) => println!("without the CA: refused, {kind:?}"),
        other => println!("without the CA: {:?}", other.map(|_| "built")),
    }
    Ok(())
}
