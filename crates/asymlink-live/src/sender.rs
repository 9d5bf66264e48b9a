//! Sending from a second thread (`[process] tx_thread = true`).
//!
//! On veth a send call runs the receiving host's stack for every frame it sends; while
//! it runs, the event loop cannot read the frames that arrive meanwhile, the other
//! direction's among them. With a sender thread per output interface the loop hands the
//! frames that are due to that interface's sender over a bounded single-producer
//! single-consumer queue and goes back to reading; the sender makes the send calls (or
//! fills and kicks the transmit ring) and hands every frame back over a second queue,
//! with the instant its send call started, so that the loop returns its buffer to the
//! pool and counts it (sent, refused by the device, or left unsent at exit).
//!
//! * **Order**: one FIFO per output interface, served by one thread, so the frames of a
//!   direction leave in the order the pipeline released them.
//! * **Bounds**: at most [`CAPACITY`] frames are out (queued, in a send call, or waiting
//!   to be given back); when the loop has more, they wait in its own pending queue.
//!   The return queue has the same capacity, so it is never full.
//! * **Wake-ups**: the sender sleeps (`park`) when it has nothing to send; handing it
//!   frames wakes it (no system call when it is awake). With `[process] busy_poll` it
//!   first keeps checking its queue that long.
//! * **Exit**: [`Sender::stop`] stops the thread after its current call; every frame not
//!   sent comes back as unsent (the loop counts it discarded at shutdown).
use crate::packet::LivePacket;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Frames out at a sender at most.
pub const CAPACITY: usize = 1024;

/// How long a sender waits before retrying a device that could not take a frame.
const RETRY: Duration = Duration::from_micros(50);

/// The writing end of a bounded queue between two threads.
pub struct Producer<T>(crossbeam_channel::Sender<T>);
/// The reading end of a bounded queue between two threads.
pub struct Consumer<T>(crossbeam_channel::Receiver<T>);

/// A queue of at most `cap` values between two threads (`crossbeam-channel`'s array
/// channel: lock-free, no system call on either end).
pub fn queue<T: Send>(cap: usize) -> (Producer<T>, Consumer<T>) {
    let (tx, rx) = crossbeam_channel::bounded(cap);
    (Producer(tx), Consumer(rx))
}

impl<T> Producer<T> {
    /// Append `v`, or give it back if the queue is full.
    pub fn push(&mut self, v: T) -> Result<(), T> {
        self.0.try_send(v).map_err(|e| e.into_inner())
    }
}

impl<T> Consumer<T> {
    /// The oldest value, if any.
    pub fn pop(&mut self) -> Option<T> {
        self.0.try_recv().ok()
    }
    /// Whether the queue holds nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What a sender thread sends on.
pub trait TxDevice: Send + 'static {
    /// Send `frames` in order; returns how many the device took (the rest later);
    /// `failed` gets the indices among those it refused for good.
    fn send(&mut self, frames: &[&[u8]], failed: &mut Vec<usize>) -> io::Result<usize>;
    /// Retry frames the device took but could not hand to its driver yet.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Whether [`TxDevice::flush`] has frames to retry.
    fn needs_flush(&self) -> bool {
        false
    }
    /// Wait until the device can take a frame, at most `timeout`.
    fn wait_writable(&self, timeout: Duration);
    /// UNIX nanoseconds now (the start of a send call).
    fn now_ns(&self) -> u64 {
        crate::sys::realtime_ns()
    }
}

/// A frame a sender is done with.
pub struct Done {
    /// The frame.
    pub pkt: LivePacket,
    /// What became of it.
    pub outcome: Outcome,
}

/// What became of a frame handed to a sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Handed to the device by a send call that started at `at` (UNIX ns) with `frames`
    /// frames.
    Sent {
        /// Start of the send call.
        at: u64,
        /// Frames in that call.
        frames: u32,
    },
    /// The device refused it for good.
    Refused,
    /// Not sent: the sender stopped first.
    Unsent,
}

/// How a sender thread runs.
#[derive(Clone, Debug, Default)]
pub struct SenderOptions {
    /// Frames per send call at most.
    pub batch: usize,
    /// Keep checking the queue this long before sleeping.
    pub busy_poll: Duration,
    /// Run on every CPU but this one (the event loop's, when it is pinned).
    pub avoid_cpu: Option<usize>,
    /// The thread's name.
    pub name: String,
}

struct Shared {
    stop: AtomicBool,
    /// The last error of a send call, if any (logged by the loop).
    error: std::sync::Mutex<Option<String>>,
}

struct Running {
    to: Producer<LivePacket>,
    done: Consumer<Done>,
    thread: JoinHandle<()>,
    shared: Arc<Shared>,
}

/// One output interface's sender thread, started at the first hand-off (so that it
/// inherits the event loop's scheduling class).
pub struct Sender {
    dev: Option<Box<dyn TxDevice>>,
    opts: SenderOptions,
    run: Option<Running>,
    /// Frames handed over and not given back yet.
    out: usize,
}

impl Sender {
    /// A sender over `dev` (the thread starts at the first [`Sender::hand_off`]).
    pub fn new(dev: Box<dyn TxDevice>, opts: SenderOptions) -> Sender {
        Sender {
            dev: Some(dev),
            opts,
            run: None,
            out: 0,
        }
    }

    fn start(&mut self) -> io::Result<&mut Running> {
        if self.run.is_none() {
            let dev = self
                .dev
                .take()
                .ok_or_else(|| io::Error::other("the sender thread has stopped"))?;
            let (to, from_loop) = queue::<LivePacket>(CAPACITY);
            let (to_loop, done) = queue::<Done>(CAPACITY);
            let shared = Arc::new(Shared {
                stop: AtomicBool::new(false),
                error: std::sync::Mutex::new(None),
            });
            let sh = shared.clone();
            let opts = self.opts.clone();
            let thread = std::thread::Builder::new()
                .name(opts.name.clone())
                .spawn(move || sender_main(dev, from_loop, to_loop, &sh, &opts))?;
            self.run = Some(Running {
                to,
                done,
                thread,
                shared,
            });
        }
        Ok(self.run.as_mut().expect("started"))
    }

    /// Hand frames from the front of `q` to the sender, in order, as many as it has room
    /// for (the rest stay in `q`). Returns how many.
    pub fn hand_off(&mut self, q: &mut VecDeque<LivePacket>) -> io::Result<usize> {
        if q.is_empty() {
            return Ok(0);
        }
        let room = CAPACITY - self.out;
        let run = self.start()?;
        let mut n = 0;
        while n < room {
            let Some(p) = q.pop_front() else { break };
            if let Err(p) = run.to.push(p) {
                q.push_front(p);
                break;
            }
            n += 1;
        }
        if n > 0 {
            run.thread.thread().unpark();
        }
        self.out += n;
        Ok(n)
    }

    /// Frames handed over and not given back yet.
    pub fn outstanding(&self) -> usize {
        self.out
    }

    /// Give every frame the sender is done with to `f`, in the order it had them.
    pub fn take_done(&mut self, f: &mut dyn FnMut(Done)) {
        let Some(run) = self.run.as_mut() else { return };
        while let Some(d) = run.done.pop() {
            self.out -= 1;
            f(d);
        }
    }

    /// The last error of a send call since the previous look, if any.
    pub fn take_error(&mut self) -> Option<String> {
        let run = self.run.as_ref()?;
        run.shared.error.lock().ok().and_then(|mut g| g.take())
    }

    /// Stop the thread after its current send call, then give every frame back (those
    /// not sent as [`Outcome::Unsent`]).
    pub fn stop(&mut self, f: &mut dyn FnMut(Done)) {
        let Some(run) = self.run.take() else { return };
        run.shared.stop.store(true, Ordering::Release);
        run.thread.thread().unpark();
        let Running {
            mut done,
            thread,
            to,
            ..
        } = run;
        let _ = thread.join();
        // The thread has moved what it still had (its own and its queue's) to `done`.
        drop(to);
        while let Some(d) = done.pop() {
            self.out -= 1;
            f(d);
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.stop(&mut |_| {});
    }
}

fn sender_main(
    mut dev: Box<dyn TxDevice>,
    mut from_loop: Consumer<LivePacket>,
    mut to_loop: Producer<Done>,
    sh: &Shared,
    opts: &SenderOptions,
) {
    if let Some(c) = opts.avoid_cpu {
        let _ = crate::sys::set_affinity_except(c);
    }
    let batch = opts.batch.max(1);
    let mut held: VecDeque<LivePacket> = VecDeque::with_capacity(batch);
    let mut failed = Vec::new();
    let give = |to_loop: &mut Producer<Done>, pkt: LivePacket, outcome: Outcome| {
        // Never full: it has room for every frame out at this sender.
        if to_loop.push(Done { pkt, outcome }).is_err() {
            unreachable!("the return queue holds every frame out");
        }
    };
    loop {
        if sh.stop.load(Ordering::Acquire) {
            break;
        }
        while held.len() < batch {
            match from_loop.pop() {
                Some(p) => held.push_back(p),
                None => break,
            }
        }
        if held.is_empty() {
            if dev.needs_flush() {
                if let Err(e) = dev.flush() {
                    note(sh, &e);
                }
                if dev.needs_flush() {
                    std::thread::park_timeout(RETRY);
                    continue;
                }
            }
            if !opts.busy_poll.is_zero() {
                let start = Instant::now();
                while from_loop.is_empty()
                    && start.elapsed() < opts.busy_poll
                    && !sh.stop.load(Ordering::Relaxed)
                {
                    std::hint::spin_loop();
                }
                if !from_loop.is_empty() {
                    continue;
                }
            }
            std::thread::park();
            continue;
        }
        let frames: Vec<&[u8]> = held.iter().map(|p| p.frame()).collect();
        let at = dev.now_ns();
        let r = dev.send(&frames, &mut failed);
        drop(frames);
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                note(sh, &e);
                failed.clear();
                failed.extend(0..held.len());
                held.len()
            }
        };
        let mut fi = 0;
        for i in 0..n {
            let p = held.pop_front().expect("n <= held");
            let outcome = if failed.get(fi) == Some(&i) {
                fi += 1;
                Outcome::Refused
            } else {
                Outcome::Sent {
                    at,
                    frames: n as u32,
                }
            };
            give(&mut to_loop, p, outcome);
        }
        if !held.is_empty() {
            // The device is full: wait for room (bounded, to notice a stop).
            dev.wait_writable(RETRY);
        }
    }
    for p in held.drain(..) {
        give(&mut to_loop, p, Outcome::Unsent);
    }
    while let Some(p) = from_loop.pop() {
        give(&mut to_loop, p, Outcome::Unsent);
    }
}

fn note(sh: &Shared, e: &io::Error) {
    if let Ok(mut g) = sh.error.lock() {
        *g = Some(e.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::LinkType;
    use asymlink_core::time::Instant as SimInstant;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    #[test]
    fn queue_is_fifo_bounded_and_drops_what_it_holds() {
        let (mut p, mut c) = queue::<Vec<u8>>(4);
        for i in 0..4u8 {
            p.push(vec![i]).unwrap();
        }
        assert_eq!(p.push(vec![9]), Err(vec![9]));
        assert_eq!(c.pop(), Some(vec![0]));
        p.push(vec![4]).unwrap();
        let got: Vec<u8> = std::iter::from_fn(|| c.pop()).map(|v| v[0]).collect();
        assert_eq!(got, [1, 2, 3, 4]);
        assert!(c.is_empty());
        // Values still queued are dropped with the queue (no leak under Miri/ASan).
        p.push(vec![5]).unwrap();
        drop((p, c));
    }

    #[test]
    fn queue_between_threads_keeps_order() {
        let (mut p, mut c) = queue::<u64>(8);
        let n = 20_000u64;
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < n {
                if p.push(i).is_ok() {
                    i += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let mut want = 0;
        while want < n {
            match c.pop() {
                Some(v) => {
                    assert_eq!(v, want);
                    want += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        t.join().unwrap();
    }

    /// A device that records what it sends; refuses frames of length `refuse`, takes at
    /// most `room` frames per call, and can be slowed down.
    struct FakeDev {
        sent: Arc<Mutex<Vec<Vec<u8>>>>,
        refuse: usize,
        room: usize,
        delay: Duration,
        calls: Arc<AtomicUsize>,
    }

    impl TxDevice for FakeDev {
        fn send(&mut self, frames: &[&[u8]], failed: &mut Vec<usize>) -> io::Result<usize> {
            failed.clear();
            self.calls.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(self.delay);
            let n = frames.len().min(self.room);
            let mut g = self.sent.lock().unwrap();
            for (i, f) in frames[..n].iter().enumerate() {
                if f.len() == self.refuse {
                    failed.push(i);
                } else {
                    g.push(f.to_vec());
                }
            }
            Ok(n)
        }
        fn wait_writable(&self, _timeout: Duration) {}
        fn now_ns(&self) -> u64 {
            7
        }
    }

    fn pkt(i: u32, len: usize) -> LivePacket {
        let mut b = vec![0u8; len.max(4)];
        b[..4].copy_from_slice(&i.to_be_bytes());
        b.truncate(len.max(4));
        LivePacket::new(b, LinkType::RawIp, SimInstant::ZERO, 0)
    }

    fn opts() -> SenderOptions {
        SenderOptions {
            batch: 8,
            name: "test-sender".into(),
            ..SenderOptions::default()
        }
    }

    #[test]
    fn frames_leave_in_order_and_come_back_counted() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let calls = Arc::new(AtomicUsize::new(0));
        let dev = FakeDev {
            sent: sent.clone(),
            refuse: 33,
            room: 5,
            delay: Duration::ZERO,
            calls: calls.clone(),
        };
        let mut s = Sender::new(Box::new(dev), opts());
        let mut q: VecDeque<LivePacket> = (0..3000u32)
            .map(|i| pkt(i, if i % 100 == 7 { 33 } else { 60 }))
            .collect();
        let (mut ok, mut refused, mut order) = (0, 0, Vec::new());
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while (ok + refused) < 3000 {
            assert!(std::time::Instant::now() < deadline, "sender stalled");
            s.hand_off(&mut q).unwrap();
            assert!(s.outstanding() <= CAPACITY);
            s.take_done(&mut |d| {
                order.push(u32::from_be_bytes(d.pkt.frame()[..4].try_into().unwrap()));
                match d.outcome {
                    Outcome::Sent { at, frames } => {
                        assert_eq!(at, 7);
                        assert!((1..=5).contains(&frames));
                        ok += 1
                    }
                    Outcome::Refused => {
                        assert_eq!(d.pkt.frame().len(), 33);
                        refused += 1
                    }
                    Outcome::Unsent => panic!("nothing is unsent before stop"),
                }
            });
            std::thread::yield_now();
        }
        assert_eq!((ok, refused), (2970, 30));
        assert_eq!(order, (0..3000).collect::<Vec<_>>());
        let g = sent.lock().unwrap();
        let ids: Vec<u32> = g
            .iter()
            .map(|f| u32::from_be_bytes(f[..4].try_into().unwrap()))
            .collect();
        assert_eq!(ids, (0..3000).filter(|i| i % 100 != 7).collect::<Vec<_>>());
        assert!(calls.load(Ordering::Relaxed) >= 3000 / 5);
        assert_eq!(s.outstanding(), 0);
    }

    #[test]
    fn stop_gives_back_every_frame_not_sent() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let dev = FakeDev {
            sent: sent.clone(),
            refuse: 0,
            room: 8,
            delay: Duration::from_millis(5),
            calls: Arc::new(AtomicUsize::new(0)),
        };
        let mut s = Sender::new(Box::new(dev), opts());
        let mut q: VecDeque<LivePacket> = (0..500u32).map(|i| pkt(i, 60)).collect();
        s.hand_off(&mut q).unwrap();
        assert!(q.is_empty());
        std::thread::sleep(Duration::from_millis(12));
        let (mut ok, mut unsent, mut order) = (0, 0, Vec::new());
        s.stop(&mut |d| {
            order.push(u32::from_be_bytes(d.pkt.frame()[..4].try_into().unwrap()));
            match d.outcome {
                Outcome::Sent { .. } => ok += 1,
                Outcome::Unsent => unsent += 1,
                Outcome::Refused => panic!("nothing refused"),
            }
        });
        assert_eq!(ok + unsent, 500);
        assert!(ok >= 8 && unsent > 0, "sent {ok}, unsent {unsent}");
        assert_eq!(ok, sent.lock().unwrap().len());
        assert_eq!(order, (0..500).collect::<Vec<_>>());
        assert_eq!(s.outstanding(), 0);
        // Stopped for good: a later hand-off is an error, the frames stay with the caller.
        let mut q: VecDeque<LivePacket> = (0..2u32).map(|i| pkt(i, 60)).collect();
        assert!(s.hand_off(&mut q).is_err());
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_full_sender_leaves_the_rest_with_the_loop() {
        let dev = FakeDev {
            sent: Arc::new(Mutex::new(Vec::new())),
            refuse: 0,
            room: 0,
            delay: Duration::ZERO,
            calls: Arc::new(AtomicUsize::new(0)),
        };
        let mut s = Sender::new(Box::new(dev), opts());
        let mut q: VecDeque<LivePacket> = (0..(CAPACITY as u32 + 10)).map(|i| pkt(i, 60)).collect();
        assert_eq!(s.hand_off(&mut q).unwrap(), CAPACITY);
        assert_eq!(q.len(), 10);
        assert_eq!(s.hand_off(&mut q).unwrap(), 0);
        let mut unsent = 0;
        s.stop(&mut |d| {
            assert_eq!(d.outcome, Outcome::Unsent);
            unsent += 1;
        });
        assert_eq!(unsent, CAPACITY);
    }
}
