//! A live server's upload gathering: which of a slot's expected requests
//! have uploaded their prompts, and when a slot's batch goes to the server
//! core.
//!
//! The scheduler tells a server which requests to expect in a slot
//! ([`UploadGathering::expect`]); each user then uploads its prompt over its
//! radio link ([`UploadGathering::upload`]). The two travel different paths,
//! so an upload may come before its expectation: it is kept (`early`) until
//! the expectation arrives or a slot has passed. A slot's batch is released
//! to the server core when every expected upload is in — the paper's servers
//! prefill a slot's requests together — or, forced, a slot after its own
//! slot ended: what is still missing then is lost (a killed or lossy link)
//! and counted. Each released request's upload start is its hand-off to the
//! link minus the transmission time the scheduler computed.
//!
//! The slotted harness needs none of this (its uploads arrive when the
//! radio model says); the server actor feeds this core its messages.

use std::collections::{BTreeMap, HashMap};

use crate::server::Assigned;

/// One request a server is told to expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectedUpload {
    pub id: u64,
    pub user: usize,
    pub input_len: u32,
    pub output_len: u32,
    /// Transmission time at the rate the scheduler computed, ns.
    pub upload_ns: u64,
}

/// A slot's batch handed to the server core.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReleasedBatch {
    pub slot: u64,
    /// The requests whose uploads are in, in the order they were expected.
    pub assigned: Vec<Assigned>,
    /// Expected requests whose uploads never came (only when forced).
    pub lost: Vec<u64>,
}

#[derive(Debug, Default)]
struct Batch {
    expected: Vec<ExpectedUpload>,
    /// Upload (hand-off to the link, arrival) by request id.
    arrived: HashMap<u64, (u64, u64)>,
}

/// The gathering state of one server.
#[derive(Debug, Default)]
pub struct UploadGathering {
    batches: BTreeMap<u64, Batch>,
    /// Uploads that came before their expectation: (hand-off, arrival).
    early: HashMap<u64, (u64, u64)>,
    /// The slot of each expected request not yet released.
    slot_of: HashMap<u64, u64>,
}

impl UploadGathering {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `id` is expected and not yet released.
    pub fn is_expected(&self, id: u64) -> bool {
        self.slot_of.contains_key(&id)
    }

    /// Requests expected and not yet released.
    pub fn forming(&self) -> usize {
        self.batches.values().map(|b| b.expected.len()).sum()
    }

    /// Slot `slot` expects `requests` (an id already expected is skipped:
    /// callers also skip ids already in service). Returns the batch if it
    /// is complete now.
    pub fn expect(
        &mut self,
        slot: u64,
        requests: impl IntoIterator<Item = ExpectedUpload>,
    ) -> Option<ReleasedBatch> {
        let b = self.batches.entry(slot).or_default();
        for r in requests {
            if self.slot_of.contains_key(&r.id) {
                continue;
            }
            self.slot_of.insert(r.id, slot);
            if let Some(up) = self.early.remove(&r.id) {
                b.arrived.insert(r.id, up);
            }
            b.expected.push(r);
        }
        self.release(slot, false)
    }

    /// The upload of request `id`, handed to its link at `handed_ns` and
    /// arrived at `arrival_ns`. Returns its slot's batch if that completes it.
    pub fn upload(&mut self, id: u64, handed_ns: u64, arrival_ns: u64) -> Option<ReleasedBatch> {
        match self.slot_of.get(&id).copied() {
            Some(slot) => {
                if let Some(b) = self.batches.get_mut(&slot) {
                    b.arrived.insert(id, (handed_ns, arrival_ns));
                }
                self.release(slot, false)
            }
            None => {
                self.early.insert(id, (handed_ns, arrival_ns));
                None
            }
        }
    }

    /// At the end of slot `t`: forces out every batch of an earlier slot
    /// (their missing uploads are lost), and forgets early uploads that
    /// arrived before `horizon_ns` (their expectation will not come).
    pub fn close_slot(&mut self, t: u64, horizon_ns: u64) -> Vec<ReleasedBatch> {
        let stale: Vec<u64> = self.batches.range(..t).map(|(&s, _)| s).collect();
        let released = stale
            .into_iter()
            .filter_map(|s| self.release(s, true))
            .collect();
        self.early
            .retain(|_, &mut (_, arrival)| arrival >= horizon_ns);
        released
    }

    /// Drops everything (a crashed server); returns how many expected
    /// requests were still forming.
    pub fn clear(&mut self) -> usize {
        let forming = self.forming();
        self.batches.clear();
        self.early.clear();
        self.slot_of.clear();
        forming
    }

    /// Releases slot `slot`'s batch once every upload is in, or with
    /// `force` whatever is in.
    fn release(&mut self, slot: u64, force: bool) -> Option<ReleasedBatch> {
        let b = self.batches.get(&slot)?;
        if !force && b.arrived.len() < b.expected.len() {
            return None;
        }
        let b = self.batches.remove(&slot)?;
        let mut out = ReleasedBatch {
            slot,
            ..ReleasedBatch::default()
        };
        for e in &b.expected {
            self.slot_of.remove(&e.id);
            match b.arrived.get(&e.id) {
                Some(&(handed, arrival)) => {
                    let start = handed.saturating_sub(e.upload_ns);
                    out.assigned.push(Assigned {
                        id: e.id,
                        user: e.user,
                        slot,
                        created_ns: start.min(arrival),
                        arrival_ns: arrival,
                        input_len: e.input_len,
                        output_len: e.output_len,
                    });
                }
                None => out.lost.push(e.id),
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: u64) -> ExpectedUpload {
        ExpectedUpload {
            id,
            user: id as usize,
            input_len: 10,
            output_len: 5,
            upload_ns: 100,
        }
    }

    #[test]
    fn a_batch_is_released_when_its_last_upload_arrives() {
        let mut g = UploadGathering::new();
        assert_eq!(g.expect(3, [e(1), e(2)]), None);
        assert!(g.is_expected(1));
        assert_eq!(g.upload(1, 1_000, 1_050), None);
        let b = g.upload(2, 1_200, 1_260).expect("complete");
        assert_eq!(b.slot, 3);
        assert!(b.lost.is_empty());
        let ids: Vec<u64> = b.assigned.iter().map(|a| a.id).collect();
        assert_eq!(ids, vec![1, 2]);
        // The upload started its transmission time before the hand-off.
        assert_eq!(b.assigned[0].created_ns, 900);
        assert_eq!(b.assigned[0].arrival_ns, 1_050);
        assert_eq!(b.assigned[1].created_ns, 1_100);
        assert!(!g.is_expected(1));
        assert_eq!(g.forming(), 0);
    }

    #[test]
    fn an_upload_before_its_expectation_is_kept() {
        let mut g = UploadGathering::new();
        assert_eq!(g.upload(7, 500, 550), None);
        let b = g.expect(0, [e(7)]).expect("already in");
        assert_eq!(b.assigned[0].arrival_ns, 550);
        assert_eq!(b.assigned[0].created_ns, 400);
    }

    #[test]
    fn a_late_slot_is_forced_out_and_its_missing_uploads_are_lost() {
        let mut g = UploadGathering::new();
        g.expect(0, [e(1), e(2)]);
        g.expect(1, [e(3)]);
        g.upload(1, 10, 20);
        // End of slot 1: slot 0 is forced, slot 1 still waits.
        let out = g.close_slot(1, 0);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].slot, 0);
        assert_eq!(out[0].lost, vec![2]);
        assert_eq!(out[0].assigned.len(), 1);
        assert!(g.is_expected(3));
        assert_eq!(g.forming(), 1);
    }

    #[test]
    fn repeats_are_skipped_and_stale_early_uploads_forgotten() {
        let mut g = UploadGathering::new();
        g.expect(0, [e(1)]);
        g.expect(0, [e(1)]);
        assert_eq!(g.forming(), 1, "a repeat is not a second request");
        g.upload(9, 0, 100);
        g.close_slot(0, 200);
        assert_eq!(g.expect(1, [e(9)]), None, "the early upload was forgotten");
        assert_eq!(g.clear(), 2);
        assert_eq!(g.forming(), 0);
    }
}
