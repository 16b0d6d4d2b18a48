//! [`HandoffReceiver`]: the receiving side of a KV handoff as a core without
//! I/O.
//!
//! Every frame that arrives by the deadline D is validated against the block
//! layout ([`decode_frame`]) and handed to the streaming RLC decoder; every
//! source packet the decoder yields (received or recovered by elimination) is
//! checked again and its payload copied into place. Frames arriving after D
//! are counted and ignored. Feedback follows the schedule documented in
//! [`crate::feedback`].
//!
//! At D, [`HandoffReceiver::report`] gives the handoff's figures and
//! [`HandoffReceiver::into_received`] the rebuild input: for each block its
//! payload bytes, zeros where missing, and the list of byte ranges that
//! arrived. The rebuild itself (zero-fill keeps a BF16 element only if both
//! its bytes arrived; the attention mask keeps a head–token row only if all of
//! its K and V bytes arrived) belongs to the gpu side and works from
//! [`ReceivedBlock::present`].

use std::ops::Range;
use std::sync::Arc;

use edgemu_codec::fec::{DecoderConfig, Outcome, PacketBody, RlcDecoder};

use crate::blocks::{check_utilities, BlockLayout};
use crate::error::HandoffError;
use crate::feedback::Feedback;
use crate::frame::decode_frame;

/// Receiver parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReceiverConfig {
    pub session: u32,
    /// Decode-start deadline D, ns after the handoff start.
    pub deadline_ns: u64,
    /// A report after this many frames at the latest (see [`crate::feedback`]).
    pub feedback_every: u32,
    /// Largest repair count accepted (the sender's K).
    pub max_repair_count: u16,
}

/// One block as received at the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedBlock {
    /// `block_bytes` bytes: the payload where it arrived, zeros elsewhere.
    pub bytes: Vec<u8>,
    /// Byte ranges that arrived, sorted, disjoint and merged.
    pub present: Vec<Range<usize>>,
}

impl ReceivedBlock {
    pub fn is_complete(&self) -> bool {
        self.present.len() == 1 && self.present[0] == (0..self.bytes.len())
    }
}

/// The whole KV as received at the deadline, block by block (block ids of the
/// layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedKv {
    pub layout: BlockLayout,
    pub blocks: Vec<ReceivedBlock>,
}

impl ReceivedKv {
    /// What a reliable byte stream of the payload in block order (FIFO)
    /// leaves at the deadline when its first `prefix.len()` bytes have been
    /// read: every block inside the prefix complete, the next one present up
    /// to where the prefix ends, the rest missing. Bytes past the payload's
    /// size are ignored.
    pub fn from_prefix(layout: BlockLayout, prefix: &[u8]) -> ReceivedKv {
        let blocks = layout
            .prefix_present(prefix.len())
            .into_iter()
            .zip(0..)
            .map(|(present, b)| {
                let range = layout.block_range(b);
                let mut bytes = vec![0u8; range.len()];
                if let Some(have) = present.first() {
                    let from = range.start + have.start..range.start + have.end;
                    if let Some(got) = prefix.get(from) {
                        bytes[have.clone()].copy_from_slice(got);
                    }
                }
                ReceivedBlock { bytes, present }
            })
            .collect();
        ReceivedKv { layout, blocks }
    }

    /// Utility of the complete blocks over the total (J^KV), with one
    /// utility per block of the layout.
    pub fn recovered_utility(&self, utilities: &[f64]) -> f64 {
        utility_of_complete(
            self.blocks.iter().map(ReceivedBlock::is_complete),
            utilities,
        )
    }
}

/// Utility of the complete blocks over the total (J^KV): `complete` says,
/// block by block, whether it is complete.
pub fn utility_of_complete(complete: impl IntoIterator<Item = bool>, utilities: &[f64]) -> f64 {
    let total: f64 = utilities.iter().sum();
    // From +0.0: `Sum` for floats starts at −0.0 (an empty handoff's
    // utility would print as "-0.0").
    let got = complete
        .into_iter()
        .zip(utilities)
        .filter(|(c, _)| *c)
        .fold(0.0, |a, (_, u)| a + u);
    got / total.max(f64::MIN_POSITIVE)
}

/// The figures of one handoff at the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct HandoffReport {
    /// Utility of blocks complete at D over the total (J^KV at D).
    pub recovered_utility: f64,
    pub blocks_complete: u32,
    pub n_blocks: u32,
    /// Source packets decoded (received or recovered).
    pub source_decoded: u32,
    pub n_source: u32,
    /// Cumulative decoded prefix at D.
    pub decoded_prefix: u32,
    pub frames_received: u32,
    pub frames_late: u32,
    pub frames_rejected: u32,
    pub repairs_received: u32,
    pub innovative_repairs: u32,
    /// Source packets recovered through repair.
    pub recovered_by_repair: u32,
    pub feedback_sent: u32,
}

/// The receiving core (see the module docs).
pub struct HandoffReceiver {
    cfg: ReceiverConfig,
    layout: BlockLayout,
    utilities: Arc<[f64]>,
    decoder: RlcDecoder,
    /// Block-major payload, zeros where missing.
    data: Vec<u8>,
    /// Per block, per fragment: decoded.
    have: Vec<bool>,
    /// Per block: fragments decoded.
    have_count: Vec<u16>,
    report: HandoffReport,
    next_seq: u32,
    last_seq: Option<u32>,
    loss_runs: u32,
    since_feedback: u32,
    last_reported_deficit: u32,
    feedback_due: bool,
    reports: u32,
}

impl std::fmt::Debug for HandoffReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandoffReceiver")
            .field("cfg", &self.cfg)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl HandoffReceiver {
    pub fn new(
        cfg: ReceiverConfig,
        layout: BlockLayout,
        utilities: Arc<[f64]>,
    ) -> Result<Self, HandoffError> {
        check_utilities(&layout, &utilities)?;
        if cfg.feedback_every == 0 || cfg.max_repair_count == 0 {
            return Err(HandoffError::Config(
                "feedback_every and max_repair_count must be positive".into(),
            ));
        }
        let n_source = layout.n_source_packets();
        let decoder = RlcDecoder::new(DecoderConfig {
            max_window: n_source + 1,
            max_count: cfg.max_repair_count,
            session: Some(cfg.session),
        })?;
        let n_blocks = layout.n_blocks();
        let frags = usize::from(layout.fragments_per_block());
        Ok(HandoffReceiver {
            decoder,
            data: vec![0; layout.total_bytes()],
            have: vec![false; n_blocks as usize * frags],
            have_count: vec![0; n_blocks as usize],
            report: HandoffReport {
                n_blocks,
                n_source,
                ..Default::default()
            },
            cfg,
            layout,
            utilities,
            next_seq: 0,
            last_seq: None,
            loss_runs: 0,
            since_feedback: 0,
            last_reported_deficit: 0,
            feedback_due: false,
            reports: 0,
        })
    }

    /// Handles one frame arriving at `now`. A malformed or hostile frame is
    /// counted and returned as an error; the state is unchanged.
    pub fn handle_packet(&mut self, now: u64, bytes: &[u8]) -> Result<(), HandoffError> {
        if now > self.cfg.deadline_ns {
            self.report.frames_late += 1;
            return Ok(());
        }
        let (_, pkt) = decode_frame(bytes, &self.layout, Some(self.cfg.session))
            .inspect_err(|_| self.report.frames_rejected += 1)?;
        let progress = self
            .decoder
            .insert(&pkt)
            .inspect_err(|_| self.report.frames_rejected += 1)?;
        self.report.frames_received += 1;
        let seq = pkt.seq;
        if seq > self.next_seq {
            self.loss_runs += 1;
        }
        if seq >= self.next_seq {
            self.next_seq = seq.saturating_add(1);
            self.last_seq = Some(seq);
        }
        match progress.outcome {
            Outcome::Innovative => {
                self.report.repairs_received += 1;
                self.report.innovative_repairs += 1;
            }
            Outcome::Redundant | Outcome::Stale => self.report.repairs_received += 1,
            Outcome::NewSource | Outcome::DuplicateSource => {}
        }
        // The packet received directly, if a source; every other decoded id
        // was recovered through repair equations.
        let direct = match pkt.body {
            PacketBody::Source(s) => Some(s.id),
            PacketBody::Repair(_) => None,
        };
        for &id in &progress.decoded {
            let Ok(Some(src)) = self.decoder.get(id) else {
                continue;
            };
            // A recovered symbol is outside bytes too: check it again.
            if self
                .layout
                .check_fragment(src.block_id, src.fragment_id, src.payload.len())
                .is_err()
            {
                self.report.frames_rejected += 1;
                continue;
            }
            let frags = usize::from(self.layout.fragments_per_block());
            let slot = src.block_id as usize * frags + usize::from(src.fragment_id);
            if self.have[slot] {
                continue;
            }
            self.have[slot] = true;
            let start = self.layout.block_range(src.block_id).start
                + self.layout.fragment_range(src.fragment_id).start;
            self.data[start..start + src.payload.len()].copy_from_slice(src.payload);
            self.report.source_decoded += 1;
            if direct != Some(id) {
                self.report.recovered_by_repair += 1;
            }
            let c = &mut self.have_count[src.block_id as usize];
            *c += 1;
            if usize::from(*c) == frags {
                self.report.blocks_complete += 1;
            }
        }
        self.report.decoded_prefix = progress.prefix;
        self.since_feedback += 1;
        let deficit = self.decoder.feedback().deficit;
        if self.since_feedback >= self.cfg.feedback_every || deficit != self.last_reported_deficit {
            self.feedback_due = true;
        }
        Ok(())
    }

    /// The feedback packet to send now, if one is due.
    pub fn poll_transmit(&mut self, now: u64) -> Option<Vec<u8>> {
        if !self.feedback_due || now > self.cfg.deadline_ns {
            return None;
        }
        self.feedback_due = false;
        self.since_feedback = 0;
        let f = self.feedback();
        self.last_reported_deficit = f.deficit;
        self.reports += 1;
        self.report.feedback_sent += 1;
        Some(f.encode().to_vec())
    }

    /// The report the receiver would send now.
    pub fn feedback(&self) -> Feedback {
        let d = self.decoder.feedback();
        Feedback {
            session: self.cfg.session,
            report: self.reports,
            cumulative: d.cumulative,
            highest_seen: d.highest_seen,
            equations: d.equations,
            unknowns: d.unknowns,
            deficit: d.deficit,
            last_seq: self.last_seq,
            received: self.report.frames_received,
            loss_runs: self.loss_runs,
            innovative: self.report.innovative_repairs,
        }
    }

    /// Utility of complete blocks over the total, now (J^KV). Summed in block
    /// order, like the total, so that all blocks complete give exactly 1.
    pub fn recovered_utility(&self) -> f64 {
        let frags = self.layout.fragments_per_block();
        utility_of_complete(self.have_count.iter().map(|&c| c == frags), &self.utilities)
    }

    /// The handoff's figures.
    pub fn report(&self) -> HandoffReport {
        HandoffReport {
            recovered_utility: self.recovered_utility(),
            ..self.report
        }
    }

    /// The received KV, block by block, for the rebuild.
    pub fn into_received(self) -> ReceivedKv {
        let frags = usize::from(self.layout.fragments_per_block());
        let blocks = (0..self.layout.n_blocks())
            .map(|b| {
                let mut present: Vec<Range<usize>> = Vec::new();
                for f in 0..frags {
                    if !self.have[b as usize * frags + f] {
                        continue;
                    }
                    let r = self.layout.fragment_range(f as u16);
                    match present.last_mut() {
                        Some(last) if last.end == r.start => last.end = r.end,
                        _ => present.push(r),
                    }
                }
                let range = self.layout.block_range(b);
                ReceivedBlock {
                    bytes: self.data[range].to_vec(),
                    present,
                }
            })
            .collect();
        ReceivedKv {
            layout: self.layout,
            blocks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_codec::fec::{EncoderConfig, RlcEncoder};

    #[test]
    fn a_prefix_completes_the_blocks_inside_it_and_part_of_the_next() {
        let layout = BlockLayout::new(1, 32, 16, 3000).unwrap();
        let payload: Vec<u8> = (0..layout.total_bytes())
            .map(|i| (i % 251) as u8 + 1)
            .collect();
        let kv = ReceivedKv::from_prefix(layout, &payload[..4000]);
        assert_eq!(kv.blocks.len(), 2);
        assert!(kv.blocks[0].is_complete());
        assert_eq!(kv.blocks[0].bytes, payload[..3000]);
        assert_eq!(kv.blocks[1].present.len(), 1);
        assert_eq!(kv.blocks[1].present[0], 0..1000);
        assert_eq!(kv.blocks[1].bytes[..1000], payload[3000..4000]);
        assert!(kv.blocks[1].bytes[1000..].iter().all(|&b| b == 0));
        assert_eq!(kv.recovered_utility(&[3.0, 1.0]), 0.75);
        let none = ReceivedKv::from_prefix(layout, &[]);
        assert!(none.blocks.iter().all(|b| b.present.is_empty()));
        assert_eq!(none.recovered_utility(&[3.0, 1.0]), 0.0);
        let all = ReceivedKv::from_prefix(layout, &payload);
        assert_eq!(all.recovered_utility(&[3.0, 1.0]), 1.0);
        // Every length, past the payload's size too: the prefix and no more.
        let longer: Vec<u8> = payload.iter().copied().chain([9; 10]).collect();
        for n in 0..=longer.len() {
            let kv = ReceivedKv::from_prefix(layout, &longer[..n]);
            let complete = kv.blocks.iter().filter(|b| b.is_complete()).count();
            assert_eq!(complete, n.min(6000) / 3000, "{n}");
            let got: usize = kv
                .blocks
                .iter()
                .flat_map(|b| &b.present)
                .map(|r| r.len())
                .sum();
            assert_eq!(got, n.min(6000), "{n}");
        }
    }

    fn setup() -> (RlcEncoder, HandoffReceiver, BlockLayout) {
        // 2 blocks of 3000 bytes: fragments of 1368, 1368, 264.
        let layout = BlockLayout::new(1, 32, 16, 3000).unwrap();
        let enc = RlcEncoder::new(EncoderConfig {
            k: 8,
            ..Default::default()
        })
        .unwrap();
        let rx = HandoffReceiver::new(
            ReceiverConfig {
                session: 0,
                deadline_ns: 1_000,
                feedback_every: 4,
                max_repair_count: 8,
            },
            layout,
            vec![1.0, 3.0].into(),
        )
        .unwrap();
        (enc, rx, layout)
    }

    fn frame(enc: &mut RlcEncoder, layout: &BlockLayout, block: u32, fragment: u16) -> Vec<u8> {
        let len = layout.fragment_range(fragment).len();
        let payload: Vec<u8> = (0..len).map(|i| (i as u8) ^ (block as u8 + 1)).collect();
        enc.send_source(block, fragment, &payload).unwrap().bytes
    }

    #[test]
    fn nothing_received_is_positive_zero() {
        let (_, rx, _) = setup();
        let u = rx.recovered_utility();
        assert!(u == 0.0 && u.is_sign_positive(), "{u:?}");
        assert_eq!(format!("{u}"), "0");
    }

    #[test]
    fn feedback_every_n_and_on_deficit_change() {
        let (mut enc, mut rx, l) = setup();
        for f in 0..3 {
            rx.handle_packet(10, &frame(&mut enc, &l, 1, f)).unwrap();
            assert_eq!(rx.poll_transmit(10), None, "not due after {f}");
        }
        rx.handle_packet(10, &frame(&mut enc, &l, 0, 0)).unwrap();
        let fb = Feedback::decode(&rx.poll_transmit(10).unwrap()).unwrap();
        assert_eq!((fb.cumulative, fb.deficit, fb.received), (4, 0, 4));
        // Block 1 (utility 3 of 4) is complete.
        assert_eq!(rx.recovered_utility(), 0.75);
        // Fragment (0, 1) lost: the next arrival reveals a gap → report now.
        let _lost = frame(&mut enc, &l, 0, 1);
        rx.handle_packet(20, &frame(&mut enc, &l, 0, 2)).unwrap();
        let fb = Feedback::decode(&rx.poll_transmit(20).unwrap()).unwrap();
        assert_eq!(
            (fb.cumulative, fb.deficit, fb.loss_runs, fb.lost()),
            (4, 1, 1, 1)
        );
        // A repair recovers it; the deficit change triggers a report.
        let repair = enc.repair(8).unwrap().bytes;
        rx.handle_packet(30, &repair).unwrap();
        let fb = Feedback::decode(&rx.poll_transmit(30).unwrap()).unwrap();
        assert_eq!((fb.cumulative, fb.deficit, fb.innovative), (6, 0, 1));
        let r = rx.report();
        assert_eq!(
            (
                r.recovered_utility,
                r.recovered_by_repair,
                r.blocks_complete
            ),
            (1.0, 1, 2)
        );
        // After the deadline nothing counts.
        rx.handle_packet(2_000, &repair).unwrap();
        assert_eq!(rx.report().frames_late, 1);
    }

    #[test]
    fn received_kv_lists_present_ranges() {
        let (mut enc, mut rx, l) = setup();
        let f0 = frame(&mut enc, &l, 0, 0);
        let _f1 = frame(&mut enc, &l, 0, 1);
        let f2 = frame(&mut enc, &l, 0, 2);
        rx.handle_packet(1, &f0).unwrap();
        rx.handle_packet(1, &f2).unwrap();
        let kv = rx.into_received();
        let b0 = &kv.blocks[0];
        assert_eq!(b0.present, vec![0..1368, 2736..3000]);
        assert!(b0.bytes[1368..2736].iter().all(|&x| x == 0));
        assert_eq!(b0.bytes[0], 1);
        assert!(!b0.is_complete());
        assert!(kv.blocks[1].present.is_empty());
    }
}
