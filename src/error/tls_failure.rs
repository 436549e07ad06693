//! The sorting of TLS failures into [`TlsFailure`]s: a rustls error found inside a redis-rs or
//! I/O error, and the kind it is. Kept here, beside the error it builds, so that the error
//! layer asks nothing of the TLS set-up above it; no I/O.

use std::io;
use std::sync::Arc;

use rustls::{AlertDescription, CertificateError, InvalidMessage};

use super::{Error, TlsFailure};

/// The typed error for a redis-rs error caused by TLS, if it is one.
///
/// redis-rs keeps an I/O error as an `Arc<dyn Error>` (its `source`), and rustls's errors
/// reach it inside that I/O error (`io::Error::get_ref`).
pub(crate) fn failure_of_redis_error(err: &redis::RedisError) -> Option<Error> {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    let source = std::error::Error::source(err)?;
    let io_error = source.downcast_ref::<io::Error>().or_else(|| {
        source
            .downcast_ref::<Shared>()
            .and_then(|shared| shared.downcast_ref::<io::Error>())
    })?;
    failure_of_io_error(io_error)
}

/// The typed error for an I/O error caused by TLS (a rustls error inside), if it is one.
pub(crate) fn failure_of_io_error(err: &io::Error) -> Option<Error> {
    let tls_error = err.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(Error::Tls {
        kind: kind_of(tls_error)?,
        detail: tls_error.to_string(),
    })
}

/// Sorts a rustls error. `None` for errors that do not say the session could not be set up
/// (a session that broke later stays an I/O error: the request may have run).
fn kind_of(err: &rustls::Error) -> Option<TlsFailure> {
    use rustls::Error as E;
    Some(match err {
        E::InvalidCertificate(CertificateError::UnknownIssuer) => TlsFailure::UnknownIssuer,
        E::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => TlsFailure::HostNameMismatch,
        E::InvalidCertificate(_) => TlsFailure::InvalidCertificate,
        // A TLS peer never sends a record of an unknown type or version: the first bytes
        // of the answer were something else.
        E::InvalidMessage(InvalidMessage::InvalidContentType)
        | E::InvalidMessage(InvalidMessage::UnknownProtocolVersion) => TlsFailure::NotTls,
        E::AlertReceived(AlertDescription::CertificateRequired) => {
            TlsFailure::ClientCertificateRequired
        }
        E::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied,
        ) => TlsFailure::ClientCertificateRejected,
        E::AlertReceived(
            AlertDescription::HandshakeFailure
            | AlertDescription::ProtocolVersion
            | AlertDescription::InsufficientSecurity
            | AlertDescription::IllegalParameter
            | AlertDescription::UnrecognisedName
            | AlertDescription::MissingExtension
            | AlertDescription::UnsupportedExtension
            | AlertDescription::NoApplicationProtocol,
        ) => TlsFailure::HandshakeRefused,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn certificate_errors_are_told_apart() {
        let cases = [
            (CertificateError::UnknownIssuer, TlsFailure::UnknownIssuer),
            (
                CertificateError::NotValidForName,
                TlsFailure::HostNameMismatch,
            ),
            (CertificateError::Expired, TlsFailure::InvalidCertificate),
            (
                CertificateError::NotValidYet,
                TlsFailure::InvalidCertificate,
            ),
            (
                CertificateError::BadSignature,
                TlsFailure::InvalidCertificate,
            ),
            (CertificateError::Revoked, TlsFailure::InvalidCertificate),
        ];
        for (certificate_error, kind) in cases {
            let err = rustls::Error::InvalidCertificate(certificate_error.clone());
            assert_eq!(kind_of(&err), Some(kind), "{certificate_error:?}");
        }
    }

    #[test]
    fn alerts_are_told_apart() {
        let cases = [
            (
                AlertDescription::CertificateRequired,
                TlsFailure::ClientCertificateRequired,
            ),
            (
                AlertDescription::UnknownCA,
                TlsFailure::ClientCertificateRejected,
            ),
            (
                AlertDescription::BadCertificate,
                TlsFailure::ClientCertificateRejected,
            ),
            (
                AlertDescription::HandshakeFailure,
                TlsFailure::HandshakeRefused,
            ),
            (
                AlertDescription::ProtocolVersion,
                TlsFailure::HandshakeRefused,
            ),
        ];
        for (alert, kind) in cases {
            assert_eq!(kind_of(&rustls::Error::AlertReceived(alert)), Some(kind));
        }
    }

    #[test]
    fn a_session_broken_later_is_not_a_tls_failure() {
        assert_eq!(kind_of(&rustls::Error::DecryptError), None);
        let io_error = io::Error::new(io::ErrorKind::InvalidData, rustls::Error::DecryptError);
        assert!(failure_of_io_error(&io_error).is_none());
    }

    #[test]
    fn a_rustls_error_inside_a_redis_error_is_found() {
        let io_error = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        let redis_error = redis::RedisError::from(io_error);
        assert!(matches!(
            failure_of_redis_error(&redis_error),
            Some(Error::Tls {
                kind: TlsFailure::UnknownIssuer,
                ..
            })
        ));
        assert!(matches!(
            Error::from_redis(redis_error, Duration::from_secs(1)),
            Error::Tls {
                kind: TlsFailure::UnknownIssuer,
                ..
            }
        ));
    }
}
