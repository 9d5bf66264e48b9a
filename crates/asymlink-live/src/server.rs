//! The stats endpoints: a unix socket that answers each connection with the JSON snapshot,
//! and a minimal HTTP/1.1 server on a loopback address that answers `GET /metrics` with
//! the Prometheus text format. Both run on their own threads and only read the
//! [`Published`] snapshot; they never touch the datapath.

use crate::stats::Published;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::Duration;

/// Bind the unix socket (a stale socket file is replaced) and serve it.
pub fn serve_unix(path: &Path, p: Published) -> std::io::Result<()> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if m.file_type().is_socket() {
            std::fs::remove_file(path)?;
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
    }
    let l = UnixListener::bind(path)?;
    std::thread::Builder::new()
        .name("stats-unix".into())
        .spawn(move || {
            for mut c in l.incoming().flatten() {
                let _ = c.set_write_timeout(Some(Duration::from_secs(1)));
                let mut body = p.json();
                body.push('\n');
                let _ = c.write_all(body.as_bytes());
            }
        })?;
    Ok(())
}

/// Bind the Prometheus endpoint (loopback only; checked by the configuration) and serve it.
pub fn serve_prometheus(addr: SocketAddr, p: Published) -> std::io::Result<SocketAddr> {
    assert!(addr.ip().is_loopback(), "stats endpoint must be loopback");
    let l = TcpListener::bind(addr)?;
    let local = l.local_addr()?;
    std::thread::Builder::new()
        .name("stats-prom".into())
        .spawn(move || {
            for mut c in l.incoming().flatten() {
                let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
                let _ = c.set_write_timeout(Some(Duration::from_secs(1)));
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&req);
                let path = line.split_whitespace().nth(1).unwrap_or("");
                let (status, body) = if path == "/metrics" || path == "/" {
                    ("200 OK", p.prometheus())
                } else {
                    ("404 Not Found", "not found; try /metrics\n".to_string())
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = c.write_all(resp.as_bytes());
            }
        })?;
    Ok(local)
}
