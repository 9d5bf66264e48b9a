//! pcap capture of what the box sends, one classic-pcap file per direction (pcap-file
//! 2.0, nanosecond timestamps, LINKTYPE_ETHERNET for AF_PACKET and LINKTYPE_RAW for TUN),
//! as the simulator writes its captures. Files are opened before privileges are dropped,
//! flushed every stats interval and at exit. A write error stops that capture (counted
//! and reported in the stats); forwarding goes on.

use crate::packet::LinkType;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};
use std::cell::RefCell;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

/// A buffered file that the capture can flush while `PcapWriter` owns a handle to it.
#[derive(Clone)]
struct Shared(Rc<RefCell<BufWriter<File>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

/// One capture file.
pub struct Capture {
    w: Option<PcapWriter<Shared>>,
    file: Shared,
    snaplen: u32,
    /// Packets written.
    pub packets: u64,
    /// First write error, if any.
    pub error: Option<String>,
}

impl Capture {
    /// Create (truncate) `path`.
    pub fn create(path: &Path, lt: LinkType, snaplen: u32) -> std::io::Result<Capture> {
        let file = Shared(Rc::new(RefCell::new(BufWriter::with_capacity(
            1 << 16,
            File::create(path)?,
        ))));
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen,
            datalink: match lt {
                LinkType::Ethernet => DataLink::ETHERNET,
                LinkType::RawIp => DataLink::RAW,
            },
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::native(),
        };
        let w = PcapWriter::with_header(file.clone(), header).map_err(std::io::Error::other)?;
        Ok(Capture {
            w: Some(w),
            file,
            snaplen,
            packets: 0,
            error: None,
        })
    }

    /// Record a frame sent at `unix_ns`.
    #[inline]
    pub fn write(&mut self, unix_ns: u64, frame: &[u8]) {
        let Some(w) = self.w.as_mut() else { return };
        let cap = frame.len().min(self.snaplen as usize);
        let pkt = PcapPacket::new(
            Duration::from_nanos(unix_ns),
            frame.len() as u32,
            &frame[..cap],
        );
        if let Err(e) = w.write_packet(&pkt) {
            self.error = Some(e.to_string());
            self.w = None;
            return;
        }
        self.packets += 1;
    }

    /// Push buffered records to the file.
    pub fn flush(&mut self) {
        if self.w.is_some() {
            if let Err(e) = self.file.flush() {
                self.error = Some(e.to_string());
                self.w = None;
            }
        }
    }
}
