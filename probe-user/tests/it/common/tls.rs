//! https for the tests (debuginfod.rs, otlp.rs): a CA made for the test and a
//! certificate it signed for 127.0.0.1 (openssl), and a python3 https server of a
//! directory's files.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{output_ok, stop_with_test};

/// A CA of the test's own, and a server certificate and key it signed for 127.0.0.1.
pub(crate) struct TestCa {
    /// The CA's certificate (PEM): what a client given SSL_CERT_FILE trusts.
    pub ca: PathBuf,
    /// The server's certificate (PEM) and key.
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    /// Made under `dir` (created): P-256 keys, valid for two days.
    pub(crate) fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("TLS dir");
        let at = |name: &str| dir.join(name);
        let openssl = |args: &[&str], what: &str| {
            output_ok(
                Command::new("openssl").args(args).current_dir(dir),
                &format!("openssl: {what}"),
            );
        };
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=probetop test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
            "the CA",
        );
        openssl(
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
            "the server's request",
        );
        std::fs::write(
            at("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("extensions");
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "server.ext",
                "-out",
                "server.pem",
            ],
            "the server's certificate",
        );
        Self {
            ca: at("ca.pem"),
            cert: at("server.pem"),
            key: at("server.key"),
        }
    }
}

/// python3's http.server over TLS, serving the files under a directory by path.
pub(crate) struct HttpsFiles {
    child: Child,
    /// `https://127.0.0.1:PORT`
    pub url: String,
}

impl Drop for HttpsFiles {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Binds a free loopback port, says it, then serves: a client whose handshake fails is
/// dropped and the server goes on.
const SERVER: &str = r#"
import functools, http.server, ssl, sys
root, cert, key = sys.argv[1:4]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("port", server.server_address[1], flush=True)
server.serve_forever()
"#;

impl HttpsFiles {
    /// Serves `root` with `ca`'s server certificate; returned once it listens. Its log
    /// goes to `log`.
    pub(crate) fn serve(root: &Path, ca: &TestCa, log: &Path) -> Self {
        let mut cmd = Command::new("python3");
        cmd.arg("-c")
            .arg(SERVER)
            .arg(root)
            .arg(&ca.cert)
            .arg(&ca.key)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("log"));
        stop_with_test(&mut cmd, libc::SIGTERM);
        let mut child = cmd.spawn().expect("start python3");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the server's first line");
        let port: u16 = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "the https server did not start ({line:?}): {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            });
        Self {
            child,
            url: format!("https://127.0.0.1:{port}"),
        }
    }
}
