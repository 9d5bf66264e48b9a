//! The event loop under a fake clock with scripted devices: deterministic, no privileges.

use asymlink_core::pipeline::Dir;
use asymlink_core::qdisc::DropReason;
use asymlink_core::time::Instant;
use asymlink_live::clock::Clock;
use asymlink_live::engine::DiscardReason;
use asymlink_live::runtime::Control;
use asymlink_live::sys::Signal;
use etherparse::PacketBuilder;

mod common;
use common::*;

/// An Ethernet + IPv4 + TCP frame with `payload` bytes, tagged by the IP identification.
fn tcp(tag: u16, payload: usize, ack_only: bool) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
        .tcp(40000, 5001, 1000 + tag as u32, 65535);
    let b = if ack_only {
        b.ack(777)
    } else {
        b.ack(777).psh()
    };
    let data = vec![0xab; payload];
    let mut out = Vec::new();
    b.write(&mut out, &data).unwrap();
    // Set the identification to the tag and fix the header checksum.
    out[18..20].copy_from_slice(&tag.to_be_bytes());
    fix_ipv4_checksum(&mut out[14..34]);
    out
}

fn fix_ipv4_checksum(h: &mut [u8]) {
    h[10] = 0;
    h[11] = 0;
    let c = ipv4_sum(h);
    h[10..12].copy_from_slice(&(!c).to_be_bytes());
}

#[test]
fn plain_wire_forwards_both_ways_untouched() {
    let (mut el, clock) = setup("");
    let f1 = tcp(1, 100, false);
    let f2 = tcp(2, 0, true);
    el.io().arrive(ms(1), 0, f1.clone());
    el.io().arrive(ms(2), 1, f2.clone());
    run_until(&mut el, &clock, ms(10));
    let sent = &el.io().sent;
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0], (ms(1), 1, f1), "a → b, same instant, same bytes");
    assert_eq!(sent[1], (ms(2), 0, f2), "b → a");
}

#[test]
fn serialisation_and_propagation() {
    // 1500-byte IP packets at 1 Mbit/s take 12 ms each; 20 ms propagation.
    let (mut el, clock) = setup("[emulation.to_b]\nrate = \"1Mbit\"\ndelay = \"20ms\"\n");
    for i in 0..5 {
        el.io().arrive(ms(0), 0, tcp(i, 1460, false));
    }
    run_until(&mut el, &clock, ms(200));
    let times: Vec<Instant> = el.io().sent.iter().map(|s| s.0).collect();
    let want: Vec<Instant> = (1..=5).map(|i| ms(12 * i + 20)).collect();
    assert_eq!(times, want);
    let tags: Vec<u16> = el.io().sent.iter().map(|s| tag_of(&s.2)).collect();
    assert_eq!(tags, vec![0, 1, 2, 3, 4]);
}

#[test]
fn atm_cells_are_charged() {
    // A 40-byte ACK over LLC/SNAP is 2 cells = 106 bytes: 1 ms at 848 kbit/s.
    let (mut el, clock) = setup(
        "[emulation.to_b]\nrate = \"848kbit\"\nlinklayer = { encap = \"llc_snap_routed\" }\n",
    );
    for i in 0..3 {
        el.io().arrive(ms(0), 0, tcp(i, 0, true));
    }
    run_until(&mut el, &clock, ms(10));
    let times: Vec<Instant> = el.io().sent.iter().map(|s| s.0).collect();
    assert_eq!(times, vec![ms(1), ms(2), ms(3)]);
}

#[test]
fn late_wakeups_do_not_lose_rate_and_idle_links_bank_nothing() {
    // Arrivals spread out: each packet starts when it arrives (idle link), not earlier.
    let (mut el, clock) = setup("[emulation.to_b]\nrate = \"1Mbit\"\n");
    el.io().arrive(ms(0), 0, tcp(0, 1460, false));
    el.io().arrive(ms(100), 0, tcp(1, 1460, false));
    el.io().arrive(ms(100), 0, tcp(2, 1460, false));
    run_until(&mut el, &clock, ms(200));
    let times: Vec<Instant> = el.io().sent.iter().map(|s| s.0).collect();
    assert_eq!(times, vec![ms(12), ms(112), ms(124)]);
}

#[test]
fn modem_buffer_overflows_and_counts() {
    // modem_buffer = 3p: one packet on the line plus three waiting; the rest are dropped.
    let (mut el, clock) = setup("[emulation.to_b]\nrate = \"1Mbit\"\nmodem_buffer = \"3p\"\n");
    for i in 0..10 {
        el.io().arrive(ms(0), 0, tcp(i, 1460, false));
    }
    run_until(&mut el, &clock, ms(100));
    assert_eq!(el.io().sent.len(), 4);
    let c = el.engine().counters(Dir::ToB);
    assert_eq!(c.discarded.get(DropReason::ModemBufferFull), 6);
    let snap = el.snapshot(clock.now());
    assert_eq!(snap["directions"]["to_b"]["link"]["modem_dropped"], 6);
}

#[test]
fn shaped_discipline_feeds_an_unbuffered_link() {
    // Prio puts ACKs first when the discipline is the link's queue.
    let (mut el, clock) = setup(
        r#"
[to_b]
classifier = { default = "bulk", rules = [{ class = "ack", match = { pure_ack = true } }] }
qdisc = { kind = "prio", bands = [{ classes = ["ack"] }, { classes = ["bulk"] }] }
[emulation.to_b]
rate = "1Mbit"
"#,
    );
    for i in 0..3 {
        el.io().arrive(ms(0), 0, tcp(i, 1460, false));
    }
    el.io().arrive(ms(1), 0, tcp(100, 0, true));
    run_until(&mut el, &clock, ms(100));
    let tags: Vec<u16> = el.io().sent.iter().map(|s| tag_of(&s.2)).collect();
    assert_eq!(
        tags,
        vec![0, 100, 1, 2],
        "the ACK overtakes the queued data"
    );
    let snap = el.snapshot(clock.now());
    assert_eq!(snap["directions"]["to_b"]["classes"]["ack"], 1);
    assert_eq!(snap["directions"]["to_b"]["classes"]["bulk"], 3);
}

fn loss_trace(seed_text: &str) -> Vec<u16> {
    let (mut el, clock) = setup(&format!(
        "seed = 0\n[emulation.to_b]\nloss = 0.3\n{seed_text}"
    ));
    for i in 0..1000 {
        el.io().arrive(us(i as u64 * 10), 0, tcp(i, 10, false));
    }
    run_until(&mut el, &clock, ms(20));
    el.io().sent.iter().map(|s| tag_of(&s.2)).collect()
}

#[test]
fn loss_is_seeded_and_about_right() {
    let a = loss_trace("");
    let b = loss_trace("");
    assert_eq!(a, b, "same seed, same trace");
    assert!(
        (620..=780).contains(&a.len()),
        "{} of 1000 delivered at 30 % loss",
        a.len()
    );
}

#[test]
fn rewritten_packets_leave_with_correct_checksums() {
    let (mut el, clock) = setup("rewrite = [{ kind = \"set_dscp\", dscp = 46 }]\n");
    el.io().arrive(ms(0), 0, tcp(1, 100, false));
    run_until(&mut el, &clock, ms(1));
    let f = &el.io().sent[0].2;
    assert_eq!(f[15] >> 2, 46);
    assert_eq!(
        ipv4_sum(&f[14..34]),
        0xffff,
        "IPv4 header checksum verifies"
    );
}

/// Frames that are not well-formed IP (each a real hazard for a parser).
fn hostile() -> Vec<(&'static str, Vec<u8>)> {
    let good = tcp(9, 20, false);
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x4f; // IHL 15 = 60 bytes of header in a 60-byte packet
    let mut bad_doff = good.clone();
    bad_doff[14 + 20 + 12] = 0xf0; // data offset 60 bytes, beyond the packet
    let mut tiny_doff = good.clone();
    tiny_doff[14 + 20 + 12] = 0x20; // data offset 8 < 20
    let mut opts_overrun = tcp(10, 0, true);
    // Grow the TCP header to 24 bytes with one option claiming 40 bytes.
    opts_overrun.truncate(14 + 40);
    opts_overrun.extend_from_slice(&[8, 40, 0, 0]);
    opts_overrun[14 + 20 + 12] = 0x60;
    opts_overrun[16..18].copy_from_slice(&44u16.to_be_bytes());
    fix_ipv4_checksum(&mut opts_overrun[14..34]);
    let mut truncated = good.clone();
    truncated.truncate(14 + 30); // IP total length says more
    let mut fragment = good.clone();
    fragment[20] = 0x20; // MF set, offset 0
    fix_ipv4_checksum(&mut fragment[14..34]);
    let mut v6_ext = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
    let mut ip6 = vec![0x60, 0, 0, 0, 0, 8, 0, 64];
    ip6.extend_from_slice(&[0; 32]);
    ip6.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop, then TCP that is absent
    v6_ext.extend_from_slice(&ip6);
    let mut jumbo = good.clone();
    jumbo.resize(9014, 0);
    let arp = {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend_from_slice(&[0; 28]);
        f
    };
    let mut bad_version = good.clone();
    bad_version[14] = 0x75;
    vec![
        ("bad_ihl", bad_ihl),
        ("bad_data_offset", bad_doff),
        ("tiny_data_offset", tiny_doff),
        ("options_overrun", opts_overrun),
        ("truncated", truncated),
        ("fragment", fragment),
        ("ipv6_ext_truncated", v6_ext),
        ("jumbo_padded", jumbo),
        ("arp", arp),
        ("bad_version", bad_version),
        ("header_only", good[..14].to_vec()),
    ]
}

#[test]
fn hostile_frames_are_forwarded_untouched() {
    let (mut el, clock) = setup("rewrite = [{ kind = \"set_dscp\", dscp = 46 }]\n");
    let frames = hostile();
    for (i, (_, f)) in frames.iter().enumerate() {
        el.io().arrive(us(i as u64), 0, f.clone());
    }
    el.io().arrive(ms(1), 0, vec![1, 2, 3]); // runt: cannot be sent as Ethernet
    run_until(&mut el, &clock, ms(5));
    let sent: Vec<&Vec<u8>> = el.io().sent.iter().map(|s| &s.2).collect();
    assert_eq!(sent.len(), frames.len());
    for ((name, f), s) in frames.iter().zip(&sent) {
        if *name == "fragment" || *name == "jumbo_padded" || *name == "options_overrun" {
            // Parsed (opaque transport / link padding / a TCP option walk that stopped
            // early, as Linux parses it: possibly signed, so the TCP bytes stay as they
            // are): only the DSCP rewrite applies, which is mutable even under AH.
            assert_eq!(s[15] >> 2, 46, "{name}");
            assert_eq!(ipv4_sum(&s[14..34]), 0xffff, "{name}");
            assert_eq!(&s[..15], &f[..15], "{name}");
            assert_eq!(&s[16..24], &f[16..24], "{name}");
            assert_eq!(&s[26..], &f[26..], "{name}");
        } else {
            assert_eq!(*s, f, "{name} forwarded untouched");
        }
    }
    let c = el.engine().counters(Dir::ToB);
    assert_eq!(c.discarded.get(DropReason::Malformed), 1, "the runt");
    assert_eq!(c.fragments, 1);
    let snap = el.snapshot(clock.now());
    let u = &snap["directions"]["to_b"]["unparsed"];
    assert_eq!(u["non_ip"], 1);
    assert_eq!(u["runt"], 1);
    assert!(u["bad_ip"].as_u64().unwrap() >= 3, "{u}");
    assert!(u["bad_transport"].as_u64().unwrap() >= 2, "{u}");
}

#[test]
fn hostile_frames_dropped_by_policy_are_counted() {
    let (mut el, clock) = setup("malformed = \"drop\"\n");
    let frames = hostile();
    let n = frames.len();
    for (i, (_, f)) in frames.into_iter().enumerate() {
        el.io().arrive(us(i as u64), 0, f);
    }
    run_until(&mut el, &clock, ms(5));
    let sent = el.io().sent.len();
    let c = el.engine().counters(Dir::ToB);
    let dropped = c.discarded.get(DropReason::Malformed);
    // ARP, the fragment, the padded jumbo and the option overrun (parsed leniently, as
    // Linux does) are not malformed.
    assert_eq!(sent, 4);
    assert_eq!(dropped as usize, n - 4);
}

#[test]
fn device_refusals_are_counted_not_fatal() {
    let (mut el, clock) = setup("");
    let big = tcp(1, 1000, false);
    el.io().refuse_len = Some(big.len());
    el.io().arrive(ms(0), 0, big);
    el.io().arrive(ms(1), 0, tcp(2, 10, false));
    run_until(&mut el, &clock, ms(5));
    assert_eq!(el.io().sent.len(), 1);
    assert_eq!(
        el.engine()
            .counters(Dir::ToB)
            .discarded
            .get(DiscardReason::TxError),
        1
    );
}

fn temp_config(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("al-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("box.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn sighup_reload_keeps_queued_packets_and_applies_new_policy() {
    // A 100 kbit/s shaper holds the packets; the reload replaces it with a prio that puts
    // ACKs first: nothing is lost and the queued ACK now goes first.
    let slow = format!(
        "{BASE}[to_b]\nqdisc = {{ kind = \"tbf\", rate = \"100kbit\", burst = \"1600B\" }}\n"
    );
    let fast = format!(
        "{BASE}[to_b]\nclassifier = {{ default = \"bulk\", rules = [{{ class = \"ack\", match = {{ pure_ack = true }} }}] }}\n\
         qdisc = {{ kind = \"prio\", bands = [{{ classes = [\"ack\"] }}, {{ classes = [\"bulk\"], queue = {{ kind = \"tbf\", rate = \"100kbit\", burst = \"1600B\" }} }}] }}\n"
    );
    let path = temp_config("reload", &slow);
    let (mut el, clock) = setup(&slow[BASE.len()..]);
    el.set_config_path(path.clone());
    for i in 0..5 {
        el.io().arrive(ms(0), 0, tcp(i, 1460, false));
    }
    el.io().arrive(ms(0), 0, tcp(50, 0, true));
    // The running configuration is already loaded: the file now holds the next one.
    std::fs::write(&path, &fast).unwrap();
    el.io().signal(ms(2), Signal::Reload);
    run_until(&mut el, &clock, ms(2000));
    assert_eq!(el.io().sent[0].0, ms(0), "the bucket's burst");
    assert_eq!(el.engine().reloads(), 1);
    let tags: Vec<u16> = el.io().sent.iter().map(|s| tag_of(&s.2)).collect();
    assert_eq!(tags.len(), 6, "nothing lost: {tags:?}");
    assert_eq!(
        tags[1], 50,
        "the ACK is served first under the new policy: {tags:?}"
    );
    assert_eq!(el.io().sent[1].0, ms(2), "at the reload");
    let snap = el.snapshot(clock.now());
    assert_eq!(snap["reloads"], 1);
    assert_eq!(snap["directions"]["to_b"]["classes"]["ack"], 1);
    std::fs::remove_dir_all(path.parent().unwrap()).ok();
}

#[test]
fn bad_reload_keeps_the_running_configuration() {
    let path = temp_config("badreload", BASE);
    let (mut el, clock) = setup("");
    el.set_config_path(path.clone());
    std::fs::write(
        &path,
        format!("{BASE}[to_b]\nqdisc = {{ kind = \"nope\" }}\n"),
    )
    .unwrap();
    el.io().signal(ms(1), Signal::Reload);
    run_until(&mut el, &clock, ms(2));
    std::fs::write(&path, BASE.replace("a0", "a1")).unwrap();
    el.io().signal(ms(3), Signal::Reload);
    el.io().arrive(ms(4), 0, tcp(1, 10, false));
    run_until(&mut el, &clock, ms(5));
    let snap = el.snapshot(clock.now());
    assert_eq!(snap["reload_failures"], 2);
    assert!(snap["last_reload_error"]
        .as_str()
        .unwrap()
        .contains("interfaces"));
    assert_eq!(el.engine().reloads(), 0);
    assert_eq!(el.io().sent.len(), 1, "still forwarding");
    std::fs::remove_dir_all(path.parent().unwrap()).ok();
}

#[test]
fn exit_flushes_stats_and_counts_what_was_held() {
    let (mut el, clock) = setup("[emulation.to_b]\nrate = \"1Mbit\"\n");
    let dir = std::env::temp_dir().join(format!("al-test-{}-exit", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stats = dir.join("final.json");
    el.set_stats_file(std::fs::File::create(&stats).unwrap());
    for i in 0..5 {
        el.io().arrive(ms(0), 0, tcp(i, 1460, false));
    }
    el.io().signal(ms(30), Signal::Exit);
    assert_eq!(run_until(&mut el, &clock, ms(100)), Control::Exit);
    el.engine().check_conservation().unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(v["directions"]["to_b"]["sent"], 2);
    assert_eq!(v["directions"]["to_b"]["discarded"]["shutdown"], 3);
    assert_eq!(v["directions"]["to_b"]["received"], 5);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_loop_sleeps_until_the_next_deadline() {
    // With a 1 Mbit/s link and 3 packets, the loop wakes for the arrival and then once per
    // departure (plus the stats publication at 0), not in a busy loop.
    let (mut el, clock) = setup("[emulation.to_b]\nrate = \"1Mbit\"\n");
    for i in 0..3 {
        el.io().arrive(ms(0), 0, tcp(i, 1460, false));
    }
    run_until(&mut el, &clock, ms(50));
    let w = el.snapshot(clock.now())["wakeups"].as_u64().unwrap();
    assert!(w <= 6, "{w} wake-ups");
}

/// A sender thread's device in memory: records what it sends (side, frame) in order, or,
/// `stuck`, takes nothing.
struct MemTx {
    side: usize,
    out: Sent,
    stuck: bool,
}

impl asymlink_live::sender::TxDevice for MemTx {
    fn send(&mut self, frames: &[&[u8]], failed: &mut Vec<usize>) -> std::io::Result<usize> {
        failed.clear();
        if self.stuck {
            return Ok(0);
        }
        let mut g = self.out.lock().unwrap();
        g.extend(frames.iter().map(|f| (self.side, f.to_vec())));
        Ok(frames.len())
    }
    fn wait_writable(&self, t: std::time::Duration) {
        std::thread::sleep(t);
    }
}

type Sent = std::sync::Arc<std::sync::Mutex<Vec<(usize, Vec<u8>)>>>;

fn with_senders(extra: &str, stuck: bool) -> (EventLoopMem, asymlink_live::clock::FakeClock, Sent) {
    let (mut el, clock) = setup(extra);
    let out: Sent = Default::default();
    el.io().send_through([0, 1].map(|side| {
        Box::new(MemTx {
            side,
            out: out.clone(),
            stuck,
        }) as Box<dyn asymlink_live::sender::TxDevice>
    }));
    (el, clock, out)
}

type EventLoopMem = asymlink_live::runtime::EventLoop<
    asymlink_live::clock::FakeClock,
    asymlink_live::runtime::MemIo,
>;

#[test]
fn sender_threads_keep_order_bytes_and_counts() {
    // The rewrite edits every frame: it must leave with its checksum fixed, through the
    // sender as without it.
    let (mut el, clock, out) =
        with_senders("rewrite = [{ kind = \"set_dscp\", dscp = 46 }]\n", false);
    let n = 300u16;
    for i in 0..n {
        el.io().arrive(us(10 * i as u64), 0, tcp(i, 200, false));
        el.io()
            .arrive(us(10 * i as u64 + 5), 1, tcp(1000 + i, 0, true));
    }
    // Frames out at a sender are neither sent nor held yet: no conservation check here.
    while clock.now() <= ms(5) {
        el.step().unwrap();
    }
    // The loop gives the frames to the senders as they are due; wait for them to send.
    let t0 = std::time::Instant::now();
    while out.lock().unwrap().len() < 2 * n as usize {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "senders stalled"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    el.io().signal(ms(6), Signal::Exit);
    assert_eq!(run_until(&mut el, &clock, ms(10)), Control::Exit);
    el.engine().check_conservation().unwrap();
    let sent = out.lock().unwrap();
    let to_b: Vec<&Vec<u8>> = sent.iter().filter(|s| s.0 == 1).map(|s| &s.1).collect();
    let to_a: Vec<u16> = sent
        .iter()
        .filter(|s| s.0 == 0)
        .map(|s| tag_of(&s.1))
        .collect();
    assert_eq!(
        to_b.iter().map(|f| tag_of(f)).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>()
    );
    assert_eq!(to_a, (1000..1000 + n).collect::<Vec<_>>());
    for f in &to_b {
        assert_eq!(f[15] >> 2, 46, "DSCP rewritten");
        assert_eq!(ipv4_sum(&f[14..34]), 0xffff, "IPv4 header checksum");
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&f[26..34]);
        let tcp_len = f.len() - 34;
        pseudo.extend_from_slice(&[0, 6, (tcp_len >> 8) as u8, tcp_len as u8]);
        pseudo.extend_from_slice(&f[34..]);
        assert_eq!(ipv4_sum(&pseudo), 0xffff, "TCP checksum");
    }
    for d in [Dir::ToB, Dir::ToA] {
        let c = el.engine().counters(d);
        assert_eq!(
            (c.received, c.sent, c.discarded_total()),
            (n as u64, n as u64, 0)
        );
    }
}

#[test]
fn frames_still_at_a_sender_are_discarded_at_exit() {
    let (mut el, clock, out) = with_senders("", true);
    for i in 0..40u16 {
        el.io().arrive(us(10 * i as u64), 0, tcp(i, 100, false));
    }
    el.io().signal(ms(3), Signal::Exit);
    assert_eq!(run_until(&mut el, &clock, ms(10)), Control::Exit);
    el.engine().check_conservation().unwrap();
    assert!(out.lock().unwrap().is_empty());
    let c = el.engine().counters(Dir::ToB);
    assert_eq!(c.received, 40);
    assert_eq!(c.sent, 0);
    assert_eq!(c.discarded.get(DiscardReason::Shutdown), 40);
}

/// With devices that tell without a system call that a frame waits (rings, AF_XDP), the
/// frames that reach side b while the loop sends toward b (on veth, the replies of the
/// host behind b, whose stack runs inside the send call) leave toward a in the same
/// wake-up; with other devices they wait for the next one.
#[test]
fn replies_arriving_during_the_send_toward_b_leave_in_the_same_wakeup() {
    for rings in [true, false] {
        let (mut el, _clock) = setup("");
        el.io().rings = rings;
        el.io().reply_b = Some(tcp(99, 0, true));
        el.io().arrive(ms(1), 0, tcp(1, 1460, false));
        let mut steps = 0;
        while el.io().sent.is_empty() {
            el.step().unwrap();
            steps += 1;
            assert!(steps < 100, "nothing sent");
        }
        let sent: Vec<(usize, u16)> = el.io().sent.iter().map(|s| (s.1, tag_of(&s.2))).collect();
        if rings {
            assert_eq!(sent, [(1, 1), (0, 99)]);
        } else {
            assert_eq!(sent, [(1, 1)]);
            el.step().unwrap();
            let sent: Vec<(usize, u16)> =
                el.io().sent.iter().map(|s| (s.1, tag_of(&s.2))).collect();
            assert_eq!(sent, [(1, 1), (0, 99)]);
        }
    }
}
