//! Helpers shared by the event-loop tests: a box on in-memory devices driven by a fake
//! clock, and frames tagged by their IPv4 identification.
#![allow(dead_code)]

use asymlink_core::time::Instant;
use asymlink_live::clock::{Clock, FakeClock};
use asymlink_live::packet::LinkType;
use asymlink_live::runtime::{Control, EventLoop, MemIo};
use asymlink_live::BoxConfig;

/// The configuration every test adds its sections to.
pub const BASE: &str = "[interfaces]\na = \"a0\"\nb = \"b0\"\n[stats]\ninterval = \"1000s\"\n";

pub fn ms(x: u64) -> Instant {
    Instant::from_millis(x)
}

pub fn us(x: u64) -> Instant {
    Instant::from_micros(x)
}

/// One's-complement sum of `h` (an odd last byte padded with zero), folded to 16 bits.
pub fn ipv4_sum(h: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for w in h.chunks(2) {
        s += u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]) as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The tag of an Ethernet + IPv4 frame: its IP identification.
pub fn tag_of(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[18], frame[19]])
}

/// A box configured with `extra` + [`BASE`] on in-memory Ethernet devices.
pub fn setup(extra: &str) -> (EventLoop<FakeClock, MemIo>, FakeClock) {
    let cfg = BoxConfig::parse(&format!("{extra}\n{BASE}")).unwrap();
    cfg.validate().unwrap();
    let clock = FakeClock::new();
    let io = MemIo::new(clock.clone(), LinkType::Ethernet);
    let mut el = EventLoop::new(clock.clone(), io, cfg, 1).unwrap();
    el.set_log(Box::new(|_| {}));
    (el, clock)
}

/// Step the loop until the clock passes `until` (or it exits); conservation must hold.
pub fn run_until(
    el: &mut EventLoop<FakeClock, MemIo>,
    clock: &FakeClock,
    until: Instant,
) -> Control {
    for _ in 0..10_000_000 {
        if el.step().unwrap() == Control::Exit {
            return Control::Exit;
        }
        if clock.now() > until {
            break;
        }
    }
    el.engine().check_conservation().unwrap();
    Control::Continue
}
