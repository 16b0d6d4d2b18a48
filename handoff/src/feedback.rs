//! Receiver feedback: what the receiver tells the sender on the reverse link.
//!
//! Fixed 48-byte packet, big-endian:
//!
//! ```text
//!  0      magic 0xFB
//!  1      version 1
//!  2..4   reserved, 0
//!  4..8   session
//!  8..12  report number (counts up; the sender ignores older reports)
//! 12..16  cumulative decoded prefix (every source id below is decoded)
//! 16..20  highest source id seen + 1 (0 = none yet)
//! 20..24  independent equations held
//! 24..28  unknowns: undecoded ids in [prefix, highest seen]
//! 28..32  deficit = unknowns − equations
//! 32..36  highest frame seq received + 1 (0 = none yet)
//! 36..40  frames received
//! 40..44  loss runs: gaps in the frame seqs received so far
//! 44..48  innovative repairs received
//! ```
//!
//! Frames lost up to the last seq = `last_seq + 1 − received`; the sender's
//! loss estimate is that over `last_seq + 1`, and the mean loss-run length is
//! lost / runs.
//!
//! **Schedule** (receiver side): a report is due after a received frame when
//! `feedback_every` (default 4) frames arrived since the last report, or at
//! once when the deficit differs from the last reported one (a new loss was
//! detected or a repair resolved one), so the sender learns of losses within
//! one one-way delay and of steady progress every few packets.
//!
//! [`Feedback::decode`] is a decoder of outside bytes: typed errors for every
//! inconsistency, never a panic (proptest below, fuzz target
//! `handoff_feedback`).

use crate::error::HandoffError;

pub const FEEDBACK_LEN: usize = 48;
pub const FEEDBACK_MAGIC: u8 = 0xFB;
pub const FEEDBACK_VERSION: u8 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Feedback {
    pub session: u32,
    pub report: u32,
    pub cumulative: u32,
    pub highest_seen: Option<u32>,
    pub equations: u32,
    pub unknowns: u32,
    pub deficit: u32,
    pub last_seq: Option<u32>,
    pub received: u32,
    pub loss_runs: u32,
    pub innovative: u32,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn plus_one(x: Option<u32>) -> u32 {
    x.map_or(0, |v| v.wrapping_add(1))
}

impl Feedback {
    /// Frames lost up to `last_seq` (seq gaps).
    pub fn lost(&self) -> u32 {
        plus_one(self.last_seq).saturating_sub(self.received)
    }

    pub fn encode(&self) -> [u8; FEEDBACK_LEN] {
        let mut b = [0u8; FEEDBACK_LEN];
        b[0] = FEEDBACK_MAGIC;
        b[1] = FEEDBACK_VERSION;
        let fields = [
            self.session,
            self.report,
            self.cumulative,
            plus_one(self.highest_seen),
            self.equations,
            self.unknowns,
            self.deficit,
            plus_one(self.last_seq),
            self.received,
            self.loss_runs,
            self.innovative,
        ];
        for (i, f) in fields.iter().enumerate() {
            b[4 + 4 * i..8 + 4 * i].copy_from_slice(&f.to_be_bytes());
        }
        b
    }

    /// Parses and checks one packet (see the module docs for the rules).
    pub fn decode(b: &[u8]) -> Result<Feedback, HandoffError> {
        if b.len() < FEEDBACK_LEN {
            return Err(HandoffError::FeedbackTruncated {
                needed: FEEDBACK_LEN,
                got: b.len(),
            });
        }
        if b.len() > FEEDBACK_LEN {
            return Err(HandoffError::FeedbackTooLong(b.len()));
        }
        if b[0] != FEEDBACK_MAGIC {
            return Err(HandoffError::FeedbackMagic(b[0]));
        }
        if b[1] != FEEDBACK_VERSION {
            return Err(HandoffError::FeedbackVersion(b[1]));
        }
        if b[2] != 0 || b[3] != 0 {
            return Err(HandoffError::FeedbackInconsistent(
                "reserved bytes are not zero",
            ));
        }
        let opt = |v: u32| v.checked_sub(1);
        let f = Feedback {
            session: be32(b, 4),
            report: be32(b, 8),
            cumulative: be32(b, 12),
            highest_seen: opt(be32(b, 16)),
            equations: be32(b, 20),
            unknowns: be32(b, 24),
            deficit: be32(b, 28),
            last_seq: opt(be32(b, 32)),
            received: be32(b, 36),
            loss_runs: be32(b, 40),
            innovative: be32(b, 44),
        };
        match f.highest_seen {
            None if f.cumulative != 0 || f.unknowns != 0 || f.equations != 0 => {
                return Err(HandoffError::FeedbackInconsistent(
                    "decoded or unknown packets before any was seen",
                ))
            }
            Some(h) if u64::from(f.cumulative) > u64::from(h) + 1 => {
                return Err(HandoffError::FeedbackInconsistent(
                    "prefix beyond the highest id seen",
                ))
            }
            Some(h) if u64::from(f.unknowns) > u64::from(h) + 1 - u64::from(f.cumulative) => {
                return Err(HandoffError::FeedbackInconsistent(
                    "more unknowns than ids past the prefix",
                ))
            }
            _ => {}
        }
        if f.equations > f.unknowns || f.deficit != f.unknowns - f.equations {
            return Err(HandoffError::FeedbackInconsistent(
                "deficit is not unknowns − equations",
            ));
        }
        if u64::from(f.received) > u64::from(plus_one(f.last_seq))
            || (f.last_seq.is_some() && f.received == 0)
        {
            return Err(HandoffError::FeedbackInconsistent(
                "received count disagrees with the last seq",
            ));
        }
        if f.loss_runs > f.lost() {
            return Err(HandoffError::FeedbackInconsistent(
                "more loss runs than losses",
            ));
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn good() -> Feedback {
        Feedback {
            session: 9,
            report: 3,
            cumulative: 10,
            highest_seen: Some(20),
            equations: 2,
            unknowns: 5,
            deficit: 3,
            last_seq: Some(25),
            received: 22,
            loss_runs: 2,
            innovative: 2,
        }
    }

    #[test]
    fn round_trip_and_rejections() {
        let f = good();
        assert_eq!(Feedback::decode(&f.encode()), Ok(f));
        assert_eq!(f.lost(), 4);
        let empty = Feedback::default();
        assert_eq!(Feedback::decode(&empty.encode()), Ok(empty));
        let b = f.encode();
        assert!(matches!(
            Feedback::decode(&b[..47]),
            Err(HandoffError::FeedbackTruncated { .. })
        ));
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(
            Feedback::decode(&long),
            Err(HandoffError::FeedbackTooLong(49))
        );
        let mut m = b;
        m[0] = 0;
        assert_eq!(Feedback::decode(&m), Err(HandoffError::FeedbackMagic(0)));
        let mut m = b;
        m[1] = 7;
        assert_eq!(Feedback::decode(&m), Err(HandoffError::FeedbackVersion(7)));
        for bad in [
            Feedback { deficit: 4, ..f },
            Feedback {
                equations: 6,
                deficit: 0,
                ..f
            },
            Feedback {
                cumulative: 22,
                ..f
            },
            Feedback { received: 27, ..f },
            Feedback { loss_runs: 5, ..f },
            Feedback {
                highest_seen: None,
                ..f
            },
        ] {
            assert!(
                matches!(
                    Feedback::decode(&bad.encode()),
                    Err(HandoffError::FeedbackInconsistent(_))
                ),
                "{bad:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Feedback::decode(&bytes);
        }

        #[test]
        fn flipped_never_panics(at in 0usize..48, bit in 0u8..8) {
            let mut b = good().encode();
            b[at] ^= 1 << bit;
            let _ = Feedback::decode(&b);
        }
    }
}
