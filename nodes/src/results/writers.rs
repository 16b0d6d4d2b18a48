//! Writers for the per-host result files.

use anyhow::{Context as _, Result};
use edgemu_actors::events::{Event, EventWriter};
use edgemu_actors::messages::LinkStatus;
use edgemu_actors::probes::{ProbeLog, ProbeRecord, RecordKind};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn create(path: &Path) -> Result<BufWriter<File>> {
    let f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(BufWriter::new(f))
}

/// `events.jsonl`. Events recorded before the results folder exists (mesh
/// events before the run starts) are kept and written once it is opened.
#[derive(Default)]
pub struct JsonlEvents {
    pending: Vec<String>,
    out: Option<BufWriter<File>>,
}

impl JsonlEvents {
    pub fn open(&mut self, path: &Path) -> Result<()> {
        let mut w = create(path)?;
        for line in self.pending.drain(..) {
            writeln!(w, "{line}")?;
        }
        self.out = Some(w);
        Ok(())
    }
}

/// Lets the host open the file after the [`EventLog`](edgemu_actors::events::EventLog) exists.
#[derive(Clone, Default)]
pub struct SharedEvents(pub Arc<Mutex<JsonlEvents>>);

impl EventWriter for SharedEvents {
    fn write_event(&mut self, event: &Event) {
        let Ok(line) = serde_json::to_string(event) else {
            return;
        };
        if let Ok(mut inner) = self.0.lock() {
            match inner.out.as_mut() {
                Some(w) => {
                    if let Err(e) = writeln!(w, "{line}") {
                        tracing::warn!("writing events.jsonl: {e}");
                    }
                }
                None => inner.pending.push(line),
            }
        }
    }
    fn flush(&mut self) {
        if let Ok(mut inner) = self.0.lock() {
            if let Some(w) = inner.out.as_mut() {
                let _ = w.flush();
            }
        }
    }
}

/// `links.csv`: one row per link direction per sample.
pub struct LinksCsv {
    out: BufWriter<File>,
}

impl LinksCsv {
    pub const HEADER: &'static str = "t_s,link,dir,up,rate_bps,offered,delivered,lost,queue_dropped,down_dropped,retransmissions,bytes_offered,bytes_delivered,interval_delivered_bps,queued_bytes,delay_p50_ms,delay_p99_ms";

    pub fn create(path: &Path) -> Result<Self> {
        let mut out = create(path)?;
        writeln!(out, "{}", Self::HEADER)?;
        Ok(LinksCsv { out })
    }

    /// `interval_bps`: delivered bits/s since the previous sample.
    pub fn row(&mut self, s: &LinkStatus, interval_bps: f64) -> Result<()> {
        writeln!(
            self.out,
            "{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{:.0},{},{:.3},{:.3}",
            s.t_ns as f64 / 1e9,
            s.name,
            s.dir,
            u8::from(s.up),
            s.rate_bps.map(|r| r.to_string()).unwrap_or_default(),
            s.offered,
            s.delivered,
            s.lost,
            s.queue_dropped,
            s.down_dropped,
            s.retransmissions,
            s.bytes_offered,
            s.bytes_delivered,
            interval_bps,
            s.queued_bytes,
            s.delay_p50_ns as f64 / 1e6,
            s.delay_p99_ns as f64 / 1e6,
        )?;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        self.out.flush()?;
        Ok(())
    }
}

/// `probes.csv`, shared by every probe actor of a host.
#[derive(Clone)]
pub struct ProbesCsv {
    inner: Arc<Mutex<BufWriter<File>>>,
    names: Arc<Vec<String>>,
}

impl ProbesCsv {
    pub const HEADER: &'static str = "kind,flow,at,seq,size,sent_ns,due_ns,recv_ns";

    pub fn create(path: &Path, names: Vec<String>) -> Result<Self> {
        let mut out = create(path)?;
        writeln!(out, "{}", Self::HEADER)?;
        Ok(ProbesCsv {
            inner: Arc::new(Mutex::new(out)),
            names: Arc::new(names),
        })
    }

    fn name(&self, id: edgemu_codec::ids::ActorId) -> &str {
        self.names
            .get(id.0 as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }
}

impl ProbeLog for ProbesCsv {
    fn record(&mut self, r: &ProbeRecord) {
        let kind = match r.kind {
            RecordKind::Packet => "packet",
            RecordKind::Rtt => "rtt",
        };
        let Ok(mut w) = self.inner.lock() else {
            return;
        };
        // Written straight into the buffer: this runs once per probe packet.
        let res = write!(
            w,
            "{kind},{},{},{},{},{},",
            self.name(r.flow),
            self.name(r.at),
            r.seq,
            r.size,
            r.sent_ns
        )
        .and_then(|()| match r.due_ns {
            Some(d) => write!(w, "{d}"),
            None => Ok(()),
        })
        .and_then(|()| writeln!(w, ",{}", r.recv_ns));
        if let Err(e) = res {
            tracing::warn!("writing probes.csv: {e}");
        }
    }
    fn flush(&mut self) {
        if let Ok(mut w) = self.inner.lock() {
            let _ = w.flush();
        }
    }
}

/// The open result files of one host.
pub struct HostResults {
    pub dir: PathBuf,
    pub links: LinksCsv,
    pub probes: ProbesCsv,
}

impl HostResults {
    pub fn create(
        run_dir: &Path,
        host: &str,
        events: &SharedEvents,
        names: Vec<String>,
    ) -> Result<Self> {
        let dir = run_dir.join(host);
        // One writer per host folder: a second process for the same host of
        // the same run must not truncate the first one's files.
        std::fs::create_dir(&dir).with_context(|| {
            format!("creating {} (a host folder is never reused)", dir.display())
        })?;
        if let Ok(mut e) = events.0.lock() {
            e.open(&dir.join("events.jsonl"))?;
        }
        Ok(HostResults {
            links: LinksCsv::create(&dir.join("links.csv"))?,
            probes: ProbesCsv::create(&dir.join("probes.csv"), names)?,
            dir,
        })
    }
}
