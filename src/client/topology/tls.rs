//! TLS for every connection of a manager: the builder's options, checked once at build; the
//! rustls configuration of the pub/sub connection. (The sorting of TLS failures into
//! [`TlsFailure`](crate::TlsFailure)s belongs to the error layer.)
//!
//! The two kinds of connection reach TLS through the same rustls, with the same inputs:
//! - The command connections are redis-rs's (`ConnectionAddr::TcpTls`). redis-rs is handed
//!   the PEM bytes of the options (`Client::build_with_tls`) and builds its rustls
//!   configuration from them for every new connection.
//! - The pub/sub connection (`pubsub::transport::tls_stream`) runs a rustls session of its own, with the
//!   [`rustls::ClientConfig`] built here from the same bytes the way redis-rs builds its own:
//!   the CA given, or else the system's roots loaded with rustls-native-certs; the client
//!   certificate given; verification skipped, and SNI off, only when asked for.
//!
//! Both verify the server's certificate against the host name of the URL (a DNS name, or an
//! IP address for an IP host).
//!
//! rustls needs a crypto provider, and redis-rs takes the process-wide default
//! ([`CryptoProvider::get_default`]). [`prepare`] installs ring's as the default when none is
//! installed yet; an application that installed one before keeps it, and every connection
//! uses that one.
//!
//! This module does no I/O but reading the system's roots at build, and the one probe that
//! tells a TLS-only server behind a plaintext URL ([`speaks_tls`]). Without the `tls` feature
//! only the options type and [`prepare`] are left, which refuse `rediss://`.

#[cfg(feature = "tls")]
use std::io::{self, Read, Write};
#[cfg(feature = "tls")]
use std::net::{SocketAddr, TcpStream};
#[cfg(feature = "tls")]
use std::sync::Arc;
#[cfg(feature = "tls")]
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo};
#[cfg(feature = "tls")]
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
#[cfg(feature = "tls")]
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
#[cfg(feature = "tls")]
use rustls::pki_types::pem::PemObject;
#[cfg(feature = "tls")]
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
#[cfg(feature = "tls")]
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

#[cfg(feature = "tls")]
use crate::client::topology::deadline::time_left;
use crate::error::{Error, Result};

/// The TLS options of a builder, as given; checked by [`prepare`]. (Empty without the `tls`
/// feature, whose builder methods set them.)
#[derive(Default)]
pub(crate) struct TlsOptions {
    /// The CA certificate(s) to trust instead of the system's roots, in PEM.
    #[cfg(feature = "tls")]
    pub(crate) ca_certificate_pem: Option<Vec<u8>>,
    /// The client certificate (chain) and its private key, in PEM, for mutual TLS.
    #[cfg(feature = "tls")]
    pub(crate) client_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// Accept any server certificate (development only).
    #[cfg(feature = "tls")]
    pub(crate) accept_invalid_certificates: bool,
}

impl TlsOptions {
    #[cfg(feature = "tls")]
    fn any_given(&self) -> bool {
        self.ca_certificate_pem.is_some()
            || self.client_identity_pem.is_some()
            || self.accept_invalid_certificates
    }
}

/// What the pub/sub connection needs to open a TLS session: the configuration (roots, client
/// certificate, verification) and the name the server's certificate must be valid for.
#[cfg(feature = "tls")]
pub(crate) struct TlsConnector {
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
}

#[cfg(feature = "tls")]
impl TlsConnector {
    /// A new client session, whose first flight (the client hello) is ready to be written.
    pub(crate) fn session(&self) -> io::Result<rustls::ClientConnection> {
        rustls::ClientConnection::new(Arc::clone(&self.config), self.server_name.clone())
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
    }

    /// A new client session for `host` (a master the sentinels named) instead of the URL's.
    pub(crate) fn session_for(&self, host: &str) -> io::Result<rustls::ClientConnection> {
        let name = server_name(host).map_err(io::Error::other)?;
        rustls::ClientConnection::new(Arc::clone(&self.config), name)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
    }
}

/// The command connections' redis-rs client and, for a `rediss://` URL, the pub/sub
/// connection's TLS set-up; both from `info` and the builder's `options`.
///
/// # Errors
/// [`Error::InvalidArgument`] for TLS options with a URL that is not `rediss://`, PEM that
/// holds no certificate or key, a URL with `#insecure` or with certificates of its own, or a
/// `rediss://` URL without the `tls` feature.
#[cfg(feature = "tls")]
pub(crate) fn prepare(
    info: ConnectionInfo,
    options: TlsOptions,
) -> Result<(redis::Client, Option<TlsConnector>)> {
    let Some(host) = tls_host(&info, &options)? else {
        let client = redis::Client::open(info)
            .map_err(|err| Error::InvalidArgument(format!("bad redis url: {err}")))?;
        return Ok((client, None));
    };
    let provider = ensure_crypto_provider();
    let server_name = server_name(&host)?;
    let config = client_config(&options, provider)?;
    let redis_client = command_client(info, options)?;
    Ok((
        redis_client,
        Some(TlsConnector {
            config: Arc::new(config),
            server_name,
        }),
    ))
}

/// The host of a `rediss://` connection info, once checked that it asks for no TLS setting
/// of its own (`#insecure`, certificates: the builder's options say those); `None` for a
/// plain URL, which no TLS option may come with.
#[cfg(feature = "tls")]
fn tls_host(info: &ConnectionInfo, options: &TlsOptions) -> Result<Option<String>> {
    let (host, insecure, has_own_certificates) = match info.addr() {
        ConnectionAddr::TcpTls {
            host,
            insecure,
            tls_params,
            ..
        } => (host.clone(), *insecure, tls_params.is_some()),
        other if options.any_given() => {
            return Err(Error::InvalidArgument(format!(
                "TLS options need a rediss:// URL, and {other} is not one"
            )));
        }
        _ => return Ok(None),
    };
    if insecure {
        return Err(Error::InvalidArgument(
            "a rediss:// URL with #insecure: skip the certificate checks with \
             tls_danger_accept_invalid_certificates() instead, so that it shows in the code"
                .into(),
        ));
    }
    if has_own_certificates {
        // redis-rs keeps them out of reach: the pub/sub connection could not use them.
        return Err(Error::InvalidArgument(
            "connection info with TLS certificates of its own: give them to the builder \
             (tls_ca_certificate, tls_client_certificate) instead"
                .into(),
        ));
    }
    Ok(Some(host))
}

/// The client of the command connections to a `rediss://` server: redis-rs's TLS, with the
/// builder's certificates, and its certificate checks off only when the builder says so.
#[cfg(feature = "tls")]
fn command_client(mut info: ConnectionInfo, options: TlsOptions) -> Result<redis::Client> {
    if options.accept_invalid_certificates {
        if let ConnectionAddr::TcpTls { host, port, .. } = info.addr() {
            let addr = ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: true,
                tls_params: None,
            };
            info = info.set_addr(addr);
        }
    }
    let TlsOptions {
        ca_certificate_pem,
        client_identity_pem,
        ..
    } = options;
    if ca_certificate_pem.is_none() && client_identity_pem.is_none() {
        return redis::Client::open(info)
            .map_err(|err| Error::InvalidArgument(format!("bad TLS settings: {err}")));
    }
    let certificates = redis::TlsCertificates {
        client_tls: client_identity_pem.map(|(client_cert, client_key)| redis::ClientTlsConfig {
            client_cert,
            client_key,
        }),
        root_cert: ca_certificate_pem,
    };
    redis::Client::build_with_tls(info, certificates)
        .map_err(|err| Error::InvalidArgument(format!("bad TLS settings: {err}")))
}

/// Without the `tls` feature there is no TLS session to open: no value of this type exists.
#[cfg(not(feature = "tls"))]
pub(crate) enum TlsConnector {}

/// Without the `tls` feature: the redis-rs client for a plaintext URL; `rediss://` is refused.
#[cfg(not(feature = "tls"))]
pub(crate) fn prepare(
    info: ConnectionInfo,
    _options: TlsOptions,
) -> Result<(redis::Client, Option<TlsConnector>)> {
    if let ConnectionAddr::TcpTls { .. } = info.addr() {
        return Err(Error::InvalidArgument(FEATURE_OFF.into()));
    }
    let client = redis::Client::open(info)
        .map_err(|err| Error::InvalidArgument(format!("bad redis url: {err}")))?;
    Ok((client, None))
}

/// Why a `rediss://` URL is refused by a build without the `tls` feature.
pub(crate) const FEATURE_OFF: &str =
    "rediss:// (TLS) needs redlease's `tls` cargo feature, which is off in this build";

/// The process-wide default crypto provider, ring's unless the application installed another
/// one first.
#[cfg(feature = "tls")]
fn ensure_crypto_provider() -> Arc<CryptoProvider> {
    if let Some(provider) = CryptoProvider::get_default() {
        return Arc::clone(provider);
    }
    // Fails only when another thread installed one since: then that one is the default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    CryptoProvider::get_default()
        .map(Arc::clone)
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The name the server's certificate must be valid for: the URL's host, a DNS name or an IP.
#[cfg(feature = "tls")]
fn server_name(host: &str) -> Result<ServerName<'static>> {
    let unbracketed = host
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(unbracketed.to_owned()).map_err(|err| {
        Error::InvalidArgument(format!(
            "{host:?} cannot be checked against a certificate: {err}"
        ))
    })
}

/// The pub/sub connection's configuration, made as redis-rs makes its own from the same
/// options (`create_rustls_config` in redis-rs).
#[cfg(feature = "tls")]
fn client_config(options: &TlsOptions, provider: Arc<CryptoProvider>) -> Result<ClientConfig> {
    let roots = match &options.ca_certificate_pem {
        Some(pem) => roots_from_pem(pem)?,
        None => system_roots(),
    };
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|err| Error::InvalidArgument(format!("bad TLS crypto provider: {err}")))?
        .with_root_certificates(roots);
    let mut config = match &options.client_identity_pem {
        Some((certificate_pem, key_pem)) => {
            let chain = certificates_from_pem(certificate_pem, "client certificate")?;
            let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|err| {
                Error::InvalidArgument(format!("no private key in the client key PEM: {err}"))
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|err| {
                Error::InvalidArgument(format!("unusable client certificate or key: {err}"))
            })?
        }
        None => builder.with_no_client_auth(),
    };
    if options.accept_invalid_certificates {
        // As redis-rs does for an insecure address: no SNI, no certificate checks.
        config.enable_sni = false;
        config
            .dangerous()
            .set_certificate_verifier(Arc::new(AcceptAnyServerCertificate {
                algorithms: provider.signature_verification_algorithms,
            }));
    }
    Ok(config)
}

#[cfg(feature = "tls")]
fn roots_from_pem(pem: &[u8]) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates_from_pem(pem, "CA certificate")? {
        roots
            .add(certificate)
            .map_err(|err| Error::InvalidArgument(format!("unusable CA certificate: {err}")))?;
    }
    Ok(roots)
}

/// Every certificate in `pem`; at least one.
#[cfg(feature = "tls")]
fn certificates_from_pem(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|err| Error::InvalidArgument(format!("bad {what} PEM: {err}")))?;
    if certificates.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the {what} PEM holds no certificate"
        )));
    }
    Ok(certificates)
}

/// The system's roots, as redis-rs loads them (which fails its connections when any of them
/// cannot be read: that failure is reported by the build's `PING`).
#[cfg(feature = "tls")]
fn system_roots() -> RootCertStore {
    let loaded = rustls_native_certs::load_native_certs();
    for err in &loaded.errors {
        log::warn!("cannot load a system root certificate: {err}");
    }
    let mut roots = RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(loaded.certs);
    if ignored > 0 {
        log::debug!("{ignored} system root certificates could not be parsed");
    }
    roots
}

/// Accepts any server certificate, for `tls_danger_accept_invalid_certificates`. It still
/// checks the handshake signatures (that the server holds the key of the certificate it
/// showed), which redis-rs's insecure mode skips; that can only fail against a broken server.
#[cfg(feature = "tls")]
#[derive(Debug)]
struct AcceptAnyServerCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

#[cfg(feature = "tls")]
impl ServerCertVerifier for AcceptAnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, certificate, signature, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, certificate, signature, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Whether the server at `address` answers a TLS client hello with a TLS record (a
/// handshake or an alert record), within `budget`: the check behind
/// [`TlsFailure::ServerRequiresTls`](crate::TlsFailure::ServerRequiresTls), made only after a plaintext connection was ended
/// without an answer. The hello names `host` (as SNI when it is a DNS name); nothing is
/// verified, and the connection is dropped after the first bytes.
#[cfg(feature = "tls")]
pub(crate) fn speaks_tls(address: SocketAddr, host: &str, budget: Duration) -> bool {
    let give_up_at = Instant::now() + budget;
    let probe = || -> io::Result<bool> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCertificate {
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth();
        let name = ServerName::try_from(host.to_owned())
            .unwrap_or_else(|_| ServerName::from(address.ip()));
        let mut session =
            rustls::ClientConnection::new(Arc::new(config), name).map_err(io::Error::other)?;
        let mut socket = TcpStream::connect_timeout(&address, time_left(give_up_at)?)?;
        let mut hello = Vec::new();
        session.write_tls(&mut hello)?;
        socket.set_write_timeout(Some(time_left(give_up_at)?))?;
        socket.write_all(&hello)?;
        let mut header = [0u8; 2];
        let mut filled = 0;
        while filled < header.len() {
            socket.set_read_timeout(Some(time_left(give_up_at)?))?;
            match socket.read(&mut header[filled..]) {
                Ok(0) => return Ok(false),
                Ok(read) => filled += read,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        // A handshake record (the server hello) or an alert record, of a TLS version.
        Ok(matches!(header, [0x16 | 0x15, 0x03]))
    };
    match probe() {
        Ok(speaks) => speaks,
        Err(err) => {
            log::debug!("TLS probe of {address} failed: {err}");
            false
        }
    }
}

/// Whether the server at `address` answers a plaintext `PING` in RESP (a `+` or `-` line),
/// within `budget`: the check behind [`TlsFailure::NotTls`](crate::TlsFailure::NotTls) for a server that stayed silent
/// through a TLS handshake, as a plaintext `redis-server` does (its inline-command parser
/// waits for a line end, and a client hello has a zero byte before any).
#[cfg(feature = "tls")]
pub(crate) fn speaks_plaintext_redis(address: SocketAddr, budget: Duration) -> bool {
    let give_up_at = Instant::now() + budget;
    let probe = || -> io::Result<bool> {
        let mut socket = TcpStream::connect_timeout(&address, time_left(give_up_at)?)?;
        socket.set_write_timeout(Some(time_left(give_up_at)?))?;
        socket.write_all(b"*1\r\n$4\r\nPING\r\n")?;
        let mut first = [0u8; 1];
        loop {
            socket.set_read_timeout(Some(time_left(give_up_at)?))?;
            match socket.read(&mut first) {
                Ok(0) => return Ok(false),
                Ok(_) => return Ok(matches!(first[0], b'+' | b'-')),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
    };
    match probe() {
        Ok(speaks) => speaks,
        Err(err) => {
            log::debug!("plaintext probe of {address} failed: {err}");
            false
        }
    }
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;

    #[test]
    fn an_ip_host_is_checked_as_an_ip_and_brackets_are_dropped() {
        assert!(matches!(
            server_name("127.0.0.1").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("[::1]").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("redis.example").unwrap(),
            ServerName::DnsName(_)
        ));
    }

    #[test]
    fn pem_without_a_certificate_is_refused() {
        for pem in [&b""[..], b"not a pem at all"] {
            assert!(matches!(
                roots_from_pem(pem),
                Err(Error::InvalidArgument(_))
            ));
        }
    }
}

#[cfg(all(test, not(feature = "tls")))]
mod without_the_feature {
    use crate::{Error, LockManager};

    #[test]
    fn a_tls_url_is_refused_with_the_feature_named() {
        for url in ["rediss://localhost:6379/", "rediss://127.0.0.1:1/#insecure"] {
            match LockManager::builder(url).build() {
                Err(Error::InvalidArgument(message)) => {
                    assert!(message.contains("`tls` cargo feature"), "{message}")
                }
                other => panic!("{url}: expected an invalid argument, got {other:?}"),
            }
        }
    }
}
