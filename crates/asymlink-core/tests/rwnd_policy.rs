//! The receiver-based policy (`asymlink_core::rwnd::Policy`) scripted on explicit time:
//! classification, eq. (1) with the case rules, growth, BaseRTT and the link-rate estimate.

use asymlink_core::rwnd::{FlowClass, Policy, RwndConfig};
use asymlink_core::time::{Duration, Instant};

const MSS: u32 = 536;

fn ms(v: u64) -> Instant {
    Instant::from_millis(v)
}

fn policy(toml: &str) -> Policy<u32> {
    let cfg: RwndConfig = toml::from_str(toml).unwrap();
    Policy::new(&cfg).unwrap()
}

/// The classic scenario's modem: 28.8 kbit/s = 3600 B/s, access queue of 20 packets.
fn modem() -> Policy<u32> {
    policy(
        r#"link_rate = "28.8kbit"
              access_queue = "20p""#,
    )
}

/// `n` full segments on `flow` at `t`.
#[track_caller]
fn segments(p: &mut Policy<u32>, t: Instant, flow: u32, n: u32) {
    for _ in 0..n {
        p.handle_data(t, flow, MSS);
    }
}

#[track_caller]
fn class(p: &Policy<u32>, flow: u32) -> FlowClass {
    p.flow(flow).expect("known flow").class
}

#[test]
fn flows_start_interactive_and_become_short_then_long_bulk() {
    let mut p = modem();
    p.handle_open(ms(0), 1, None);
    assert_eq!(class(&p, 1), FlowClass::Interactive);
    p.handle_data(ms(10), 1, 1_999);
    assert_eq!(
        class(&p, 1),
        FlowClass::Interactive,
        "below Rcv_short (2 KB)"
    );
    p.handle_data(ms(20), 1, 1);
    assert_eq!(
        class(&p, 1),
        FlowClass::ShortBulk,
        "2 KB since the last send"
    );
    p.handle_data(ms(30), 1, 5_999);
    assert_eq!(class(&p, 1), FlowClass::ShortBulk);
    p.handle_data(ms(40), 1, 1);
    assert_eq!(
        class(&p, 1),
        FlowClass::LongBulk,
        "8 KB since the last send"
    );
    // Pure ACKs are not "sending": the count goes on.
    p.handle_send(ms(50), 1, 0);
    assert_eq!(class(&p, 1), FlowClass::LongBulk);
    // Sending data (a new request) starts the count again.
    p.handle_send(ms(60), 1, 300);
    assert_eq!(class(&p, 1), FlowClass::Interactive);
    assert_eq!(p.flow(1).unwrap().since_send, 0);
    assert_eq!(p.counts(), [1, 0, 0, 0]);
}

#[test]
fn ports_give_the_first_guess_then_behaviour_decides() {
    let mut p = modem();
    // ftp-data from port 20: long bulk at once, until it sends data itself.
    let g = p.guess_ports(20, 40_001);
    assert_eq!(g, Some(FlowClass::LongBulk));
    p.handle_open(ms(0), 1, g);
    assert_eq!(class(&p, 1), FlowClass::LongBulk);
    p.handle_data(ms(10), 1, 3_000);
    assert_eq!(
        class(&p, 1),
        FlowClass::LongBulk,
        "a 3 KB start does not demote it"
    );
    p.handle_send(ms(20), 1, 10);
    assert_eq!(
        class(&p, 1),
        FlowClass::Interactive,
        "it sends: behaviour from now on"
    );
    // telnet (port 23): interactive, and a telnet session that receives 8 KB (a `cat`)
    // becomes long bulk like any other flow (§IV-C.4).
    let g = p.guess_ports(23, 40_002);
    assert_eq!(g, Some(FlowClass::Interactive));
    p.handle_open(ms(30), 2, g);
    p.handle_data(ms(40), 2, 8_000);
    assert_eq!(class(&p, 2), FlowClass::LongBulk);
    // Unknown ports: no guess.
    assert_eq!(p.guess_ports(80, 40_003), None);
}

#[test]
fn a_flow_quiet_for_30_s_turns_idle_and_gets_one_packet() {
    let mut p = modem();
    p.handle_open(ms(0), 1, None);
    p.handle_rtt_sample(ms(160), 1, Duration::from_millis(160));
    segments(&mut p, ms(1_000), 1, 20); // long bulk
    assert_eq!(class(&p, 1), FlowClass::LongBulk);
    // The deadline is 30 s after the last activity; poll_at never says later.
    assert!(p.poll_at().unwrap() <= ms(31_000));
    p.handle_timeout(ms(30_999));
    assert_eq!(class(&p, 1), FlowClass::LongBulk);
    p.handle_timeout(ms(31_000));
    assert_eq!(class(&p, 1), FlowClass::Idle);
    assert_eq!(p.counts(), [0, 0, 0, 1]);
    assert_eq!(p.target(1), Some(MSS as u64));
    assert_eq!(p.window(ms(31_000), 1, MSS), MSS as u64);
    assert_eq!(p.poll_at(), None, "nothing left to turn idle");
    // Sending data counts as activity too; a flow back from idle starts over.
    p.handle_send(ms(40_000), 1, 1);
    assert_eq!(class(&p, 1), FlowClass::Interactive);
    assert_eq!(p.poll_at(), Some(ms(70_000)));
    // Growth from one packet: +1 packet per packet.
    p.handle_data(ms(40_100), 1, 1);
    assert_eq!(p.flow(1).unwrap().allocation, 2 * MSS as u64);
}

#[test]
fn eq1_with_the_target_queue_of_each_case() {
    // Xput = 3600 B/s, BaseRTT = 0.16 s: 576 B in flight. QLength_Delay = 0.4 s = 1440 B,
    // QLength_Loss = half of 20 packets = 10 × 536 = 5360 B.
    let mut p = modem();
    let ftp = 1;
    p.handle_open(ms(0), ftp, Some(FlowClass::LongBulk));
    p.handle_rtt_sample(ms(0), ftp, Duration::from_millis(160));
    // Case 1 without interactive flows: QLength_Loss.
    assert_eq!(p.target(ftp), Some(576 + 5_360));
    // With telnet open (interactive), QLength_Delay is the smaller: the worked example.
    let telnet = 2;
    p.handle_open(ms(0), telnet, None);
    assert_eq!(p.target(ftp), Some(576 + 1_440));
    // The interactive flow gets what the bulk flow gets (§IV-C.4); no RTT sample of its
    // own yet, so the smallest of the receiver's stands in.
    assert_eq!(p.target(telnet), Some(576 + 1_440));
    // A short flow appears (a web object that received 2 KB): the long flow drops to one
    // packet (case 2) and the short one takes eq. (1).
    let web = 3;
    p.handle_open(ms(0), web, None);
    p.handle_rtt_sample(ms(0), web, Duration::from_millis(160));
    p.handle_data(ms(1), web, 2_000);
    assert_eq!(class(&p, web), FlowClass::ShortBulk);
    assert_eq!(p.target(ftp), Some(MSS as u64));
    assert_eq!(p.target(web), Some(576 + 1_440));
    // Two short flows share it.
    let web2 = 4;
    p.handle_open(ms(0), web2, None);
    p.handle_rtt_sample(ms(0), web2, Duration::from_millis(160));
    p.handle_data(ms(2), web2, 2_000);
    assert_eq!(p.target(web), Some((576 + 1_440) / 2));
    assert_eq!(p.target(telnet), Some((576 + 1_440) / 2));
    // Telnet closes: no interactive flow, QLength_Loss again.
    p.handle_close(ms(3), telnet);
    assert_eq!(p.target(web), Some((576 + 5_360) / 2));
    // The short flows finish: the long flow has the link to itself again.
    p.handle_close(ms(4), web);
    p.handle_close(ms(4), web2);
    assert_eq!(p.target(ftp), Some(576 + 5_360));
    assert_eq!(p.counts(), [0, 0, 1, 0]);
}

#[test]
fn two_transfers_share_the_loss_target() {
    // receiver-loss: 512 kbit/s = 64 000 B/s, BaseRTT 44 ms: 2816 B; QLength_Loss 6 × 536.
    let mut p = policy(
        r#"link_rate = "512kbit"
                          qlength_loss = "6p""#,
    );
    for f in [1, 2] {
        p.handle_open(ms(0), f, None);
        p.handle_rtt_sample(ms(44), f, Duration::from_millis(44));
        p.handle_data(ms(50), f, 8_000);
    }
    let each = (2_816 + 6 * 536) / 2;
    assert_eq!(p.target(1), Some(each));
    assert_eq!(p.target(2), Some(each));
}

#[test]
fn qlength_loss_applies_when_it_is_smaller_than_the_delay_budget() {
    // 8 Mbit/s: 0.4 s is 400 KB, far more than half a 20-packet queue.
    let mut p = policy(
        r#"link_rate = "8Mbit"
                          access_queue = "20p""#,
    );
    p.handle_open(ms(0), 1, Some(FlowClass::LongBulk));
    p.handle_open(ms(0), 2, None); // interactive
    p.handle_rtt_sample(ms(0), 1, Duration::from_millis(10));
    assert_eq!(p.target(1), Some(10_000 + 10 * 536));
}

#[test]
fn never_below_one_mss() {
    let mut p = policy(
        r#"link_rate = "1kbit"
                          qlength_loss = "100B""#,
    );
    p.handle_open(ms(0), 1, Some(FlowClass::LongBulk));
    p.handle_rtt_sample(ms(0), 1, Duration::from_millis(10));
    assert_eq!(p.target(1), Some(MSS as u64));
    assert_eq!(
        p.window(ms(1), 1, 1_460),
        1_460,
        "the MSS the caller gives counts"
    );
}

#[test]
fn allocations_grow_one_packet_per_packet_and_shrink_at_once() {
    let mut p = modem();
    let ftp = 1;
    p.handle_open(ms(0), ftp, Some(FlowClass::LongBulk));
    p.handle_rtt_sample(ms(0), ftp, Duration::from_millis(160));
    // Starts at the initial 4 packets (below its target of 5936 B).
    assert_eq!(p.window(ms(0), ftp, MSS), 4 * MSS as u64);
    p.handle_data(ms(100), ftp, MSS);
    assert_eq!(p.window(ms(100), ftp, MSS), 5 * MSS as u64);
    // A small segment still counts as one packet.
    p.handle_data(ms(110), ftp, 10);
    assert_eq!(p.window(ms(110), ftp, MSS), 6 * MSS as u64);
    // Growth stops at the target.
    segments(&mut p, ms(200), ftp, 20);
    assert_eq!(p.window(ms(200), ftp, MSS), 576 + 5_360);
    // A short flow appears: the long flow's allocation falls to one packet at once.
    p.handle_open(ms(300), 2, None);
    p.handle_rtt_sample(ms(300), 2, Duration::from_millis(160));
    p.handle_data(ms(300), 2, 2_000);
    assert_eq!(p.window(ms(300), ftp, MSS), MSS as u64);
    // The short flow grows from its initial allocation.
    assert_eq!(p.flow(2).unwrap().allocation, 5 * MSS as u64);
    // It ends; the long flow climbs back one packet per packet.
    p.handle_close(ms(400), 2);
    p.handle_data(ms(500), ftp, MSS);
    assert_eq!(p.window(ms(500), ftp, MSS), 2 * MSS as u64);
    p.handle_data(ms(600), ftp, MSS);
    assert_eq!(p.window(ms(600), ftp, MSS), 3 * MSS as u64);
}

#[test]
fn base_rtt_is_the_smallest_sample_and_responses_give_samples() {
    let mut p = modem();
    p.handle_open(ms(0), 1, None);
    assert_eq!(p.flow(1).unwrap().base_rtt, None);
    p.handle_rtt_sample(ms(700), 1, Duration::from_millis(700));
    p.handle_rtt_sample(ms(900), 1, Duration::from_millis(300));
    p.handle_rtt_sample(ms(950), 1, Duration::from_millis(400));
    assert_eq!(
        p.flow(1).unwrap().base_rtt,
        Some(Duration::from_millis(300))
    );
    // A keystroke sent while nothing arrives; its echo 170 ms later is a sample.
    p.handle_send(ms(5_000), 1, 1);
    p.handle_data(ms(5_170), 1, 1);
    assert_eq!(
        p.flow(1).unwrap().base_rtt,
        Some(Duration::from_millis(170))
    );
    // Data sent while a response is still streaming in gives no sample.
    p.handle_data(ms(6_000), 1, MSS);
    p.handle_send(ms(6_010), 1, 1);
    p.handle_data(ms(6_020), 1, MSS);
    assert_eq!(
        p.flow(1).unwrap().base_rtt,
        Some(Duration::from_millis(170))
    );
    assert_eq!(p.min_rtt(), Some(Duration::from_millis(170)));
    // An observer that does not see the whole request/response path (a middlebox) takes
    // samples only from handshakes.
    let mut p = modem().without_response_samples();
    p.handle_open(ms(0), 1, None);
    p.handle_rtt_sample(ms(300), 1, Duration::from_millis(300));
    p.handle_send(ms(5_000), 1, 1);
    p.handle_data(ms(5_170), 1, 1);
    assert_eq!(
        p.flow(1).unwrap().base_rtt,
        Some(Duration::from_millis(300))
    );
}

#[test]
fn without_a_link_rate_the_arrival_rate_is_estimated() {
    let mut p = policy(r#"access_queue = "20p""#);
    p.handle_open(ms(0), 1, Some(FlowClass::LongBulk));
    p.handle_rtt_sample(ms(0), 1, Duration::from_millis(160));
    // No estimate: not limited beyond the growth rule.
    assert_eq!(p.link_bytes_per_sec(), None);
    assert_eq!(p.target(1), Some(u64::MAX));
    // Eight back-to-back 536-byte segments 160 ms apart: 3350 B/s of payload.
    for i in 0..8 {
        p.handle_data(ms(1_000 + 160 * i), 1, MSS);
    }
    assert_eq!(p.link_bytes_per_sec(), Some(3_350));
    assert_eq!(p.target(1), Some(536 + 5_360));
}

#[test]
fn time_never_runs_backwards() {
    let mut p = modem();
    p.handle_open(ms(40_000), 1, None);
    // An earlier `now` counts as no time passing: the flow does not turn idle at 30 s
    // measured from a clock that went back.
    p.handle_data(ms(10_000), 1, 1);
    p.handle_timeout(ms(69_999));
    assert_eq!(class(&p, 1), FlowClass::Interactive);
    p.handle_timeout(ms(70_000));
    assert_eq!(class(&p, 1), FlowClass::Idle);
}

#[test]
fn unknown_flows_are_opened_on_first_sight_and_closing_is_idempotent() {
    let mut p = modem();
    p.handle_data(ms(0), 7, 100);
    assert_eq!(class(&p, 7), FlowClass::Interactive);
    assert!(p.window(ms(0), 8, MSS) >= MSS as u64);
    assert_eq!(p.len(), 2);
    p.handle_close(ms(1), 7);
    p.handle_close(ms(1), 7);
    assert_eq!(p.len(), 1);
    assert_eq!(p.stats().opened, 2);
    assert_eq!(p.stats().closed, 1);
    assert_eq!(p.counts().iter().sum::<u32>(), 1);
}
