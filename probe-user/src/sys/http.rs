//! The one HTTP client probetop has (ureq, blocking): debug files from debuginfod servers
//! and `--otlp`'s pushes, over plain http or https.
//!
//! https is rustls on ring. Servers are checked against the roots this host trusts, as
//! OpenSSL finds them (`/etc/ssl/certs/ca-certificates.crt` on Debian, and the like
//! elsewhere; rustls-native-certs); `SSL_CERT_FILE` (a PEM file) or `SSL_CERT_DIR`
//! replaces them, as for OpenSSL. A host with no CA bundle at all (a minimal container
//! running the static build) falls back to Mozilla's roots, compiled in.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ureq::tls::{Certificate, RootCerts, TlsConfig};

/// Limits of one agent's requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Longest wait for a server to accept the connection (`None`: up to `total`).
    pub connect: Option<Duration>,
    /// Longest a whole request may take, body included.
    pub total: Duration,
}

/// An agent for requests to `url`: statuses are answers, not errors; https checked
/// against the host's roots. `Err` is one line saying why https cannot be spoken (the
/// roots `SSL_CERT_FILE`/`SSL_CERT_DIR` name give no certificate).
pub(crate) fn agent(url: &str, timeouts: Timeouts) -> Result<ureq::Agent, String> {
    let mut config = ureq::Agent::config_builder()
        .timeout_connect(timeouts.connect)
        .timeout_global(Some(timeouts.total))
        .http_status_as_error(false)
        .user_agent(concat!("probetop/", env!("CARGO_PKG_VERSION")));
    if is_https(url) {
        let roots = roots().clone()?;
        config = config.tls_config(TlsConfig::builder().root_certs(roots).build());
    }
    Ok(config.build().into())
}

fn is_https(url: &str) -> bool {
    url.get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
}

/// The roots, read once a run.
fn roots() -> &'static Result<RootCerts, String> {
    static ROOTS: OnceLock<Result<RootCerts, String>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let named = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
            .into_iter()
            .filter_map(|var| {
                let value = std::env::var_os(var).filter(|v| !v.is_empty())?;
                Some(format!("{var}={}", value.to_string_lossy()))
            })
            .collect::<Vec<_>>();
        let found = rustls_native_certs::load_native_certs();
        choose_roots(
            found
                .certs
                .into_iter()
                .map(|der| Certificate::from_der(der.as_ref()).to_owned())
                .collect(),
            &found
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            &named,
        )
    })
}

/// The host's `certs` when there are any; else Mozilla's, unless the environment named
/// where the roots are (`named`, as `VAR=value`): then that is a mistake to say.
fn choose_roots(
    certs: Vec<Certificate<'static>>,
    errors: &[String],
    named: &[String],
) -> Result<RootCerts, String> {
    if !certs.is_empty() {
        return Ok(RootCerts::Specific(Arc::new(certs)));
    }
    if named.is_empty() {
        return Ok(RootCerts::WebPki);
    }
    let why = if errors.is_empty() {
        "no certificate in it".to_string()
    } else {
        errors.join("; ")
    };
    Err(format!(
        "{}: no CA certificate read for https ({why}): name a PEM file of the CAs to trust",
        named.join(" ")
    ))
}

/// One line for a failed request: what TLS refused says so and what to do, the rest as
/// ureq says it.
pub(crate) fn describe(error: &ureq::Error) -> String {
    match tls_error(error) {
        Some(rustls::Error::InvalidCertificate(why)) => {
            let hint = match why {
                rustls::CertificateError::UnknownIssuer
                | rustls::CertificateError::BadSignature => {
                    "signed by no CA this host trusts: add its CA to a PEM file named by SSL_CERT_FILE"
                }
                rustls::CertificateError::Expired
                | rustls::CertificateError::ExpiredContext { .. }
                | rustls::CertificateError::NotValidYet
                | rustls::CertificateError::NotValidYetContext { .. } => {
                    "outside its validity (or this host's clock is wrong)"
                }
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. } => {
                    "not for this host name: use the name the certificate was made for"
                }
                _ => "refused",
            };
            format!("TLS: the server's certificate is {hint} ({why})")
        }
        Some(e) => format!("TLS: {e}"),
        None => error.to_string(),
    }
}

/// The TLS error under `error`: ureq hands rustls' errors from the handshake on as I/O
/// errors wrapping them.
fn tls_error(error: &ureq::Error) -> Option<&rustls::Error> {
    match error {
        ureq::Error::Rustls(e) => Some(e),
        ureq::Error::Io(e) => e.get_ref()?.downcast_ref::<rustls::Error>(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_is_told_by_its_scheme() {
        assert!(is_https("https://debuginfod.debian.net"));
        assert!(is_https("HTTPS://x"));
        assert!(!is_https("http://127.0.0.1:8002"));
        assert!(!is_https("http"));
    }

    #[test]
    fn roots_come_from_the_host_else_mozilla_unless_named() {
        let one = Certificate::from_der(&[0x30, 0x00]).to_owned();
        assert!(matches!(
            choose_roots(vec![one], &[], &[]),
            Ok(RootCerts::Specific(c)) if c.len() == 1
        ));
        assert!(matches!(
            choose_roots(Vec::new(), &[], &[]),
            Ok(RootCerts::WebPki)
        ));
        let named = ["SSL_CERT_FILE=/nowhere.pem".to_string()];
        let line = choose_roots(Vec::new(), &["not found".to_string()], &named)
            .expect_err("named, none read");
        assert!(line.starts_with("SSL_CERT_FILE=/nowhere.pem: "), "{line}");
        assert!(line.contains("not found"), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }

    #[test]
    fn an_untrusted_certificate_is_one_line_with_what_to_do() {
        let refused = || rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        // As ureq gives it from a handshake (inside an I/O error), and on its own.
        for e in [
            ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                refused(),
            )),
            ureq::Error::Rustls(refused()),
        ] {
            let line = describe(&e);
            assert!(
                line.starts_with("TLS: the server's certificate is signed by no CA")
                    && line.contains("SSL_CERT_FILE")
                    && line.contains("UnknownIssuer"),
                "{line}"
            );
        }
        let refused = ureq::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(!describe(&refused).contains("TLS"));
    }
}
