//! Packet capture: classic pcap, LINKTYPE_RAW (IPv4/IPv6 without link header), nanosecond
//! timestamps from the start of the run. Packets are emitted byte-exact from their compact
//! form with valid checksums; payload bytes are zeros.

use asymlink_core::time::{Duration, Instant};
use asymlink_core::wire::Headers;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

/// One capture file.
pub struct Capture {
    w: Option<PcapWriter<BufWriter<File>>>,
    snaplen: u32,
    buf: Vec<u8>,
    /// Packets written.
    pub packets: u64,
    /// First write error, if any (capturing stops; the run continues).
    pub error: Option<String>,
}

impl Capture {
    /// Create `path` (parent directories included).
    pub fn create(path: &Path, snaplen: u32) -> std::io::Result<Capture> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let f = BufWriter::new(File::create(path)?);
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: snaplen.max(64),
            datalink: DataLink::RAW,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::native(),
        };
        let w = PcapWriter::with_header(f, header).map_err(std::io::Error::other)?;
        Ok(Capture {
            w: Some(w),
            snaplen: snaplen.max(64),
            buf: Vec::with_capacity(2048),
            packets: 0,
            error: None,
        })
    }

    /// Record a packet seen at `now`.
    pub fn write(&mut self, now: Instant, h: &Headers) {
        let Some(w) = self.w.as_mut() else { return };
        self.buf.clear();
        if h.emit(0, &mut self.buf).is_err() {
            return;
        }
        let orig = self.buf.len() as u32;
        let cap = (orig.min(self.snaplen)) as usize;
        let pkt = PcapPacket::new(Duration::from_nanos(now.as_nanos()), orig, &self.buf[..cap]);
        if let Err(e) = w.write_packet(&pkt) {
            self.error = Some(e.to_string());
            self.w = None;
            return;
        }
        self.packets += 1;
    }

    /// Flush buffered records to disk.
    pub fn flush(&mut self) {
        if let Some(w) = self.w.take() {
            let mut inner = w.into_writer();
            if let Err(e) = std::io::Write::flush(&mut inner) {
                self.error = Some(e.to_string());
            }
        }
    }
}
