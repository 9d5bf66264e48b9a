//! Namespaces for the root-only live tests, removed (with their veths) when dropped:
//!
//! ```text
//!  ns C: c0 ══ ra ─┐ ns R: the box ┌─ rb ══ s0 :ns S
//!                  └───────────────┘
//! ```
//!
//! The client's addresses and the server's share one /24; neighbours are static.
#![allow(dead_code)]

use nix::sched::{setns, CloneFlags};
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const MAC_C: &str = "02:00:00:78:00:01";
pub const MAC_S: &str = "02:00:00:78:00:02";

pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn in_ns(ns: &str, args: &[&str]) {
    let mut a = vec!["netns", "exec", ns];
    a.extend_from_slice(args);
    ip(&a);
}

/// Our namespaces; removed (with their veths) when dropped.
pub struct Lab {
    pub names: [String; 3],
}

impl Lab {
    pub fn c(&self) -> &str {
        &self.names[0]
    }
    pub fn r(&self) -> &str {
        &self.names[1]
    }
    pub fn s(&self) -> &str {
        &self.names[2]
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

pub fn skip_reason() -> Option<&'static str> {
    if nix::unistd::geteuid().as_raw() != 0 {
        return Some("needs root");
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("needs iproute2");
    }
    if Command::new("ethtool").arg("--version").output().is_err() {
        return Some("needs ethtool");
    }
    None
}

/// Namespaces `<prefix><pid><tag>{c,r,s}`: the client carries `subs`, the server
/// `server`, each side knows the other's MAC; no IPv6, no transmit checksum offload.
pub fn lab(prefix: &str, tag: &str, subs: &[Ipv4Addr], server: Ipv4Addr) -> Lab {
    let p = format!("{prefix}{}{tag}", std::process::id() % 100_000);
    let lab = Lab {
        names: [format!("{p}c"), format!("{p}r"), format!("{p}s")],
    };
    for n in &lab.names {
        ip(&["netns", "add", n]);
    }
    ip(&[
        "link",
        "add",
        "c0",
        "address",
        MAC_C,
        "netns",
        lab.c(),
        "type",
        "veth",
        "peer",
        "name",
        "ra",
        "netns",
        lab.r(),
    ]);
    ip(&[
        "link",
        "add",
        "s0",
        "address",
        MAC_S,
        "netns",
        lab.s(),
        "type",
        "veth",
        "peer",
        "name",
        "rb",
        "netns",
        lab.r(),
    ]);
    for n in &lab.names {
        // No IPv6 neighbour discovery or router solicitations in the counts.
        in_ns(n, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
        in_ns(
            n,
            &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
        );
        in_ns(n, &["ip", "link", "set", "lo", "up"]);
    }
    for (ns, d) in [
        (lab.c(), "c0"),
        (lab.r(), "ra"),
        (lab.r(), "rb"),
        (lab.s(), "s0"),
    ] {
        in_ns(ns, &["ip", "link", "set", d, "up"]);
        // Checksums computed by the sender, not left to an offload the frame never
        // reaches once the box has read it from the wire.
        in_ns(ns, &["ethtool", "-K", d, "tx", "off"]);
    }
    for a in subs {
        in_ns(
            lab.c(),
            &["ip", "addr", "add", &format!("{a}/24"), "dev", "c0"],
        );
    }
    in_ns(
        lab.s(),
        &["ip", "addr", "add", &format!("{server}/24"), "dev", "s0"],
    );
    // Static neighbours: no address resolution while the datagrams flow (a kernel that
    // resolves an address while a socket keeps sending may let a later datagram overtake
    // the ones it queued, which is not the box's doing).
    let perm = |ns: &str, addr: &str, mac: &str, dev: &str| {
        in_ns(
            ns,
            &[
                "ip",
                "neigh",
                "replace",
                addr,
                "lladdr",
                mac,
                "nud",
                "permanent",
                "dev",
                dev,
            ],
        );
    };
    perm(lab.c(), &server.to_string(), MAC_S, "c0");
    for a in subs {
        perm(lab.s(), &a.to_string(), MAC_C, "s0");
    }
    lab
}

pub fn enter(ns: &str) {
    let f = File::open(format!("/var/run/netns/{ns}")).expect("namespace file");
    setns(f, CloneFlags::CLONE_NEWNET).expect("setns");
}

/// The box's files for a lab test, in a directory of its own (removed when dropped): its
/// configuration and the stats it writes when it exits.
pub struct BoxFiles {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub final_json: PathBuf,
}

impl BoxFiles {
    /// A configuration for the box in `lab` (see [`BoxFiles::write`]).
    pub fn new(lab: &Lab, top: &str, rest: &str) -> BoxFiles {
        let dir = std::env::temp_dir().join(format!("{}-box", lab.r()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = BoxFiles {
            config: dir.join("box.toml"),
            final_json: dir.join("final.json"),
            dir,
        };
        f.write(top, rest);
        f
    }

    /// (Re)writes the configuration: seed 1 and `top` (top-level keys), the lab's two
    /// interfaces, root privileges, the final stats file, then `rest`, which continues
    /// the `[stats]` table (its keys first, then further tables).
    pub fn write(&self, top: &str, rest: &str) {
        std::fs::write(
            &self.config,
            format!(
                "seed = 1\n{top}[interfaces]\na = \"ra\"\nb = \"rb\"\n\
                 [privileges]\nuser = \"root\"\n[stats]\nfile = \"{}\"\n{rest}",
                self.final_json.display()
            ),
        )
        .unwrap();
    }

    /// Starts the box on this configuration in the lab's router namespace.
    pub fn start(&self, lab: &Lab) -> BoxProcess {
        BoxProcess::start(lab.r(), &self.config)
    }

    /// The stats the box wrote when it exited.
    pub fn final_stats(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(&self.final_json).expect("the box's final stats");
        serde_json::from_str(&text).expect("stats in JSON")
    }
}

impl Drop for BoxFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `asymlink-box` running in a namespace; killed if still running when dropped.
pub struct BoxProcess {
    child: Child,
}

impl BoxProcess {
    /// Starts the box in `ns` with the configuration file `config`, and returns once it
    /// has written its ready file (in the configuration's directory; at most 10 s).
    pub fn start(ns: &str, config: &Path) -> BoxProcess {
        let ready = config.with_file_name("ready");
        let _ = std::fs::remove_file(&ready);
        let child = Command::new("ip")
            .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_asymlink-box")])
            .arg("--config")
            .arg(config)
            .arg("--ready-file")
            .arg(&ready)
            .stdout(Stdio::null())
            .spawn()
            .expect("box starts");
        let mut b = BoxProcess { child };
        let t0 = Instant::now();
        while std::fs::read_to_string(&ready).map_or(true, |s| s.trim().is_empty()) {
            if let Some(status) = b.child.try_wait().unwrap() {
                panic!("the box exited before it was ready: {status}");
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the box did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        b
    }

    /// The box's process id (`ip netns exec` runs it in its own place).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the box `sig` (SIGHUP reloads its configuration).
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, sig).expect("signal the box");
    }

    /// Stops the box with SIGTERM and asserts that it exits cleanly within 10 s.
    pub fn stop(mut self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the box did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "box exit status {status}");
    }
}

impl Drop for BoxProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `per_sub` datagrams `[subscriber][seq: u32 BE]` from each subscriber to a UDP echo
/// server at `server` in the server namespace, bounded in time. Returns, per
/// subscriber, the sequence numbers the server got and those that came back, in arrival
/// order.
pub fn echo_datagrams(
    lab: &Lab,
    subs: &[Ipv4Addr],
    server: SocketAddr,
    per_sub: u32,
) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    echo(lab, subs, server, per_sub, false)
}

/// As [`echo_datagrams`], but the subscribers take turns datagram by datagram: each
/// waits for its echo (at most 200 ms) before the next subscriber sends, so the box sees
/// one subscriber's datagram at a time however late the scheduler wakes it.
pub fn echo_datagrams_in_turn(
    lab: &Lab,
    subs: &[Ipv4Addr],
    server: SocketAddr,
    per_sub: u32,
) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    echo(lab, subs, server, per_sub, true)
}

fn echo(
    lab: &Lab,
    subs: &[Ipv4Addr],
    server: SocketAddr,
    per_sub: u32,
    in_turn: bool,
) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let s_ns = lab.s().to_string();
    let n = subs.len();
    let (up_tx, up_rx) = std::sync::mpsc::channel();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let srv = std::thread::spawn(move || {
        enter(&s_ns);
        let sock = UdpSocket::bind(server).unwrap();
        roomy_receive_buffer(&sock);
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        bound_tx.send(()).unwrap();
        let mut got = vec![Vec::new(); n];
        let mut buf = [0u8; 64];
        while let Ok((len, from)) = sock.recv_from(&mut buf) {
            if len == 5 && (buf[0] as usize) < n {
                got[buf[0] as usize].push(u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]));
                let _ = sock.send_to(&buf[..len], from);
            }
        }
        up_tx.send(got).unwrap();
    });
    bound_rx.recv().unwrap();
    let c_ns = lab.c().to_string();
    let subs = subs.to_vec();
    let cli = std::thread::spawn(move || {
        enter(&c_ns);
        let socks: Vec<UdpSocket> = subs
            .iter()
            .map(|a| {
                let s = UdpSocket::bind(SocketAddr::new(IpAddr::V4(*a), 0)).unwrap();
                s.connect(server).unwrap();
                roomy_receive_buffer(&s);
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect();
        let mut back = vec![Vec::new(); socks.len()];
        let mut buf = [0u8; 64];
        let mut drain = |back: &mut Vec<Vec<u32>>| {
            for (k, s) in socks.iter().enumerate() {
                while let Ok(len) = s.recv(&mut buf) {
                    if len == 5 {
                        back[k].push(u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]));
                    }
                }
            }
        };
        for seq in 0..per_sub {
            for (k, s) in socks.iter().enumerate() {
                let mut m = [k as u8, 0, 0, 0, 0];
                m[1..].copy_from_slice(&seq.to_be_bytes());
                let _ = s.send(&m);
                if in_turn {
                    let t0 = Instant::now();
                    while back[k].last() != Some(&seq) && t0.elapsed() < Duration::from_millis(200)
                    {
                        std::thread::sleep(Duration::from_micros(50));
                        drain(&mut back);
                    }
                }
            }
            if seq % 16 == 15 {
                std::thread::sleep(Duration::from_micros(300));
                drain(&mut back);
            }
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(400) {
            drain(&mut back);
            std::thread::sleep(Duration::from_millis(5));
        }
        back
    });
    let back = cli.join().unwrap();
    let got = up_rx.recv().unwrap();
    srv.join().unwrap();
    (got, back)
}

/// Room for every datagram a test sends in the socket's receive buffer (root's
/// `SO_RCVBUFFORCE`, past `rmem_max`): the default holds about 250 small datagrams, so a
/// test thread the scheduler leaves waiting for ten milliseconds on a loaded machine
/// would lose the rest in its own socket, not in the box.
fn roomy_receive_buffer(sock: &UdpSocket) {
    use nix::sys::socket::{setsockopt, sockopt::RcvBufForce};
    setsockopt(sock, RcvBufForce, &(8 << 20)).expect("SO_RCVBUFFORCE");
}

/// Whether the sequence numbers rise strictly.
pub fn in_order(v: &[u32]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}
