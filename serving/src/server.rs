//! The edge-server slot core: a [`BatchEngine`] on the modeled backend plus
//! the slot bookkeeping of the LYREO server model (paper §III).
//!
//! Per slot: the requests the scheduler assigned to this server arrive after
//! their uploads; they are **prefilled together** — the slot's batch is
//! submitted to the engine when its last upload has arrived, so one prefill
//! covers them all, `D_pre = Σ l_in / v_pre` — then decoded with DEED
//! (continuous batching: late joining when the KV reservation fits, early
//! eviction) or, in [`BatchMode::Static`], static batching. Each request's
//! wait is from its own arrival to the start of its prefill (waiting for the
//! slot's last upload, for the iteration in progress and for KV room).
//!
//! The engine runs from iteration to iteration on its own clock; at the end
//! of each slot [`ServerSlotCore::end_slot`] reports the slot's KV peak,
//! memory-time workload `η_s = Σ m(k)·τ(k) / (M_s·Δ)`, the high-KV flag,
//! occupancy and backlog. An iteration is attributed to the slot in which it
//! starts (iterations last milliseconds; a long prefill may spill a little
//! into the next slot).
//!
//! A request whose KV reservation `(l_in + l_out)·α` exceeds `M_s` can never
//! be served here: [`ServerSlotCore::assign`] returns it as a rejection
//! record (counted in the results), never a panic or a silent drop.

use edgemu_engine::backend::Backend;
use edgemu_engine::batch::{BatchEngine, BatchMode, EngineConfig, Request};
use edgemu_engine::{ModeledBackend, Profile};

use crate::ServingError;
use edgemu_policies::lyreo::SlotLoad;

/// A request as the harness hands it to a server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Assigned {
    pub id: u64,
    pub user: usize,
    pub slot: u64,
    /// Slot start (when the request was issued), ns.
    pub created_ns: u64,
    /// When its upload completed, ns.
    pub arrival_ns: u64,
    pub input_len: u32,
    pub output_len: u32,
}

/// What happened to one request, end to end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestRecord {
    pub id: u64,
    pub user: usize,
    pub slot: u64,
    pub server: usize,
    pub input_len: u32,
    pub output_len: u32,
    pub upload_ns: u64,
    pub wait_ns: u64,
    pub prefill_ns: u64,
    pub decode_ns: u64,
    /// upload + wait + prefill + decode.
    pub e2e_ns: u64,
    /// Could never fit in this server's KV (no latency figures then).
    pub rejected: bool,
}

/// The end-of-slot report a server sends the scheduler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerReport {
    pub server: usize,
    pub slot: u64,
    /// What the scheduler sees of the slot.
    pub load: SlotLoad,
    /// Engine iterations in the slot.
    pub iterations: u64,
    pub busy_ns: u64,
}

/// The requests a crash ([`ServerSlotCore::crash`]) dropped, by id
/// (ascending), by where they were.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dropped {
    /// In the running batch (prefilling or decoding).
    pub running: Vec<u64>,
    /// Admitted, waiting for KV room or a place in the batch.
    pub queued: Vec<u64>,
    /// Handed over but not yet submitted (their batch not ready).
    pub pending: Vec<u64>,
}

impl Dropped {
    pub fn len(&self) -> usize {
        self.running.len() + self.queued.len() + self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One token of a streamed request ([`ServerSlotCore::stream`]): produced
/// by the iteration that ends at `at_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenEvent {
    pub id: u64,
    pub at_ns: u64,
    pub token: u32,
}

struct PendingBatch {
    ready_ns: u64,
    reqs: Vec<Assigned>,
}

/// A server of class `profile` and uplink `bandwidth_hz` as a scheduler
/// sees it before its first report (the harness and the live scheduler
/// actor both start from this).
pub fn initial_obs(p: &Profile, bandwidth_hz: f64) -> edgemu_policies::lyreo::ServerObs {
    edgemu_policies::lyreo::ServerObs {
        capacity_bytes: p.kv_capacity_bytes,
        kv_bytes_per_token: p.kv_bytes_per_token,
        prefill_tok_s: p.prefill_tok_s,
        decode_step_empty_s: p.step_time(1, 0),
        decode_step_full_s: p.step_time(1, p.kv_capacity_bytes),
        bandwidth_hz,
        load: SlotLoad::default(),
    }
}

/// One edge server. The backend is the modeled one (GPU class profile) by
/// default; the live server actor can put the real candle backend under
/// the same slot logic ([`ServerSlotCore::with_backend`]).
pub struct ServerSlotCore<B: Backend = ModeledBackend> {
    index: usize,
    profile: Profile,
    engine: BatchEngine<B>,
    pending: std::collections::VecDeque<PendingBatch>,
    meta: std::collections::HashMap<u64, Assigned>,
    /// End of the iteration in progress (engine clock), ns.
    busy_until: u64,
    slot_busy_ns: u64,
    bandwidth_hz: f64,
    /// Measured over predicted iteration time, smoothed (see
    /// [`ServerSlotCore::track_speed`]); `None`: the profile is taken as is.
    slowdown: Option<f64>,
    /// Requests whose tokens are reported one by one, by id.
    streamed: std::collections::HashSet<u64>,
    /// Prompt token ids of requests that came with them, by id.
    prompts: std::collections::HashMap<u64, Vec<u32>>,
    /// Tokens of streamed requests not yet taken.
    token_events: Vec<TokenEvent>,
}

/// Weight of the newest iteration in the smoothed slowdown.
const SLOWDOWN_WEIGHT: f64 = 0.2;

impl ServerSlotCore<ModeledBackend> {
    /// A server of the given profile (GPU class) and uplink bandwidth.
    pub fn new(index: usize, profile: Profile, bandwidth_hz: f64, mode: BatchMode) -> Self {
        let backend = ModeledBackend::new(profile.clone());
        ServerSlotCore::with_backend(index, backend, profile, bandwidth_hz, mode)
    }
}

impl<B: Backend> ServerSlotCore<B> {
    /// A server on `backend`; `profile` gives its KV capacity `M_s` and the
    /// class figures a scheduler sees (for a real backend: the declared class).
    pub fn with_backend(
        index: usize,
        backend: B,
        profile: Profile,
        bandwidth_hz: f64,
        mode: BatchMode,
    ) -> Self {
        let config = EngineConfig {
            kv_capacity_bytes: profile.kv_capacity_bytes,
            max_batch: usize::MAX,
            mode,
        };
        ServerSlotCore {
            index,
            engine: BatchEngine::new(backend, config),
            profile,
            pending: Default::default(),
            meta: Default::default(),
            busy_until: 0,
            slot_busy_ns: 0,
            bandwidth_hz,
            slowdown: None,
            streamed: Default::default(),
            prompts: Default::default(),
            token_events: Vec::new(),
        }
    }

    /// Reports request `id`'s tokens as they are produced
    /// ([`ServerSlotCore::take_token_events`]); `prompt`, when not empty,
    /// is its prompt's token ids, prefilled instead of synthetic tokens
    /// when their number is the request's input length (a real backend
    /// then answers the prompt; a modeled one only counts it). Call before
    /// the request's batch is due.
    pub fn stream(&mut self, id: u64, prompt: Vec<u32>) {
        self.streamed.insert(id);
        if !prompt.is_empty() {
            self.prompts.insert(id, prompt);
        }
    }

    /// Whether the backend's tokens are real (not placeholders).
    pub fn produces_tokens(&self) -> bool {
        self.engine.backend().produces_tokens()
    }

    /// Forgets what [`ServerSlotCore::stream`] was told about `id` (its
    /// request will not run here: rejected, lost, or failed).
    pub fn unstream(&mut self, id: u64) {
        self.streamed.remove(&id);
        self.prompts.remove(&id);
    }

    /// The tokens streamed requests produced since the last call, in
    /// iteration order.
    pub fn take_token_events(&mut self) -> Vec<TokenEvent> {
        std::mem::take(&mut self.token_events)
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Tracks how much slower (or faster) the backend's iterations run than
    /// its profile predicts — a real backend on a machine whose load
    /// changes after it measured itself — and scales the capability and
    /// backlog it reports by that (a smoothed ratio, starting at 1). Off by
    /// default: a modeled backend runs exactly at its profile.
    pub fn track_speed(&mut self) {
        self.slowdown.get_or_insert(1.0);
    }

    /// The smoothed measured / predicted iteration time (1 when not tracked).
    pub fn slowdown(&self) -> f64 {
        self.slowdown.unwrap_or(1.0)
    }

    fn observe_speed(
        &mut self,
        admitted_tokens: usize,
        decode_batch: usize,
        occupancy: u64,
        took_ns: u64,
    ) {
        let Some(s) = self.slowdown.as_mut() else {
            return;
        };
        let predicted = self.profile.prefill_time(admitted_tokens)
            + self.profile.step_time(decode_batch, occupancy);
        if !(predicted.is_finite() && predicted > 0.0) {
            return;
        }
        let ratio = (took_ns as f64 / 1e9 / predicted).clamp(0.1, 100.0);
        *s = (1.0 - SLOWDOWN_WEIGHT) * *s + SLOWDOWN_WEIGHT * ratio;
    }

    pub fn bandwidth_hz(&self) -> f64 {
        self.bandwidth_hz
    }

    /// Requests decoding now (the running batch).
    pub fn running(&self) -> usize {
        self.engine.running_len()
    }

    /// Requests admitted to the engine and waiting for KV room or a slot
    /// in the batch.
    pub fn queued(&self) -> usize {
        self.engine.waiting_len()
    }

    /// Requests not finished (pending arrival, queued or running).
    pub fn backlog(&self) -> usize {
        self.pending.iter().map(|b| b.reqs.len()).sum::<usize>()
            + self.engine.waiting_len()
            + self.engine.running_len()
    }

    /// Seconds of work held at this server's speed (its profile): the
    /// prefill of every prompt not yet prefilled (queued, and in batches
    /// whose uploads are still arriving) plus the decode iterations left,
    /// taken as the remaining output tokens spread over the requests held
    /// (the batch they would decode in) at the step time of that batch and
    /// the KV it occupies now. An estimate for schedulers, not a promise:
    /// admission waits for KV and requests finish at different times.
    pub fn backlog_s(&self) -> f64 {
        let work = self.engine.pending_work();
        let pending = self.pending.iter().flat_map(|b| &b.reqs);
        let prefill_tokens =
            work.prefill_tokens + pending.clone().map(|r| u64::from(r.input_len)).sum::<u64>();
        let decode_tokens =
            work.decode_tokens + pending.map(|r| u64::from(r.output_len)).sum::<u64>();
        let held = self.backlog();
        if held == 0 {
            return 0.0;
        }
        let occupancy = self.engine.ledger().occupancy_bytes();
        let iterations = decode_tokens.div_ceil(held as u64);
        (self.profile.prefill_time(prefill_tokens as usize)
            + iterations as f64 * self.profile.step_time(held, occupancy))
            * self.slowdown()
    }

    /// Whether the engine would take `r` (what `BatchEngine::check` refuses
    /// is turned away here, per request, so a malformed or repeated request
    /// from the network can never fail the engine for everyone): non-zero
    /// lengths, KV that can ever fit, an id not already queued or running.
    fn admissible(&self, r: &Assigned, batch: &[Assigned]) -> bool {
        let id_in_use = self.meta.contains_key(&r.id)
            || self
                .pending
                .iter()
                .flat_map(|b| &b.reqs)
                .any(|x| x.id == r.id)
            || batch.iter().any(|x| x.id == r.id);
        r.input_len > 0
            && r.output_len > 0
            && !id_in_use
            && self
                .engine
                .could_ever_fit(r.input_len as u64 + r.output_len as u64)
    }

    /// Takes the slot's batch for this server; returns the requests rejected
    /// (they can never fit in its KV, have a zero length, or reuse an id
    /// still in use).
    pub fn assign(&mut self, reqs: Vec<Assigned>) -> Vec<RequestRecord> {
        let mut rejected = Vec::new();
        let mut batch = Vec::with_capacity(reqs.len());
        for r in reqs {
            if self.admissible(&r, &batch) {
                batch.push(r);
            } else {
                rejected.push(RequestRecord {
                    id: r.id,
                    user: r.user,
                    slot: r.slot,
                    server: self.index,
                    input_len: r.input_len,
                    output_len: r.output_len,
                    upload_ns: r.arrival_ns.saturating_sub(r.created_ns),
                    wait_ns: 0,
                    prefill_ns: 0,
                    decode_ns: 0,
                    e2e_ns: 0,
                    rejected: true,
                });
            }
        }
        if let Some(ready_ns) = batch.iter().map(|r| r.arrival_ns).max() {
            // Slots are handed over in time order, so `ready_ns` only grows
            // except when uploads of a later slot are faster; keep sorted.
            let at = self
                .pending
                .iter()
                .position(|b| b.ready_ns > ready_ns)
                .unwrap_or(self.pending.len());
            self.pending.insert(
                at,
                PendingBatch {
                    ready_ns,
                    reqs: batch,
                },
            );
        }
        rejected
    }

    fn submit_ready(&mut self, t: u64) -> Result<(), ServingError> {
        while self.pending.front().is_some_and(|b| b.ready_ns <= t) {
            let Some(b) = self.pending.pop_front() else {
                break;
            };
            for r in b.reqs {
                let req = match self.prompts.remove(&r.id) {
                    Some(p) if p.len() == r.input_len as usize => {
                        // A real prompt ends where the model says it does.
                        let mut req = Request::with_tokens(r.id, p, r.output_len as usize);
                        req.stop_at_eos = true;
                        req
                    }
                    _ => Request::with_lengths(r.id, r.input_len as usize, r.output_len as usize),
                };
                self.engine
                    .submit(req, r.arrival_ns)
                    .map_err(|source| ServingError::Engine {
                        server: self.index,
                        source: Box::new(source),
                    })?;
                self.meta.insert(r.id, r);
            }
        }
        Ok(())
    }

    /// Runs every iteration that starts before `until_ns`; appends the
    /// requests that finished to `done`.
    pub fn advance(
        &mut self,
        until_ns: u64,
        done: &mut Vec<RequestRecord>,
    ) -> Result<(), ServingError> {
        loop {
            if self.engine.is_idle() {
                // Jump to the next batch's arrival, if it is in this window.
                match self.pending.front() {
                    Some(b) if b.ready_ns < until_ns => {
                        self.busy_until = self.busy_until.max(b.ready_ns);
                    }
                    _ => return Ok(()),
                }
            }
            let t = self.busy_until;
            if t >= until_ns {
                return Ok(());
            }
            self.submit_ready(t)?;
            let out = self.engine.step(t).map_err(|source| ServingError::Engine {
                server: self.index,
                source: Box::new(source),
            })?;
            if out.is_idle() {
                // Only possible when nothing was submitted yet; wait for it.
                match self.pending.front() {
                    Some(b) => {
                        self.busy_until = self.busy_until.max(b.ready_ns).max(t + 1);
                        continue;
                    }
                    None => return Ok(()),
                }
            }
            self.busy_until = t + out.duration_ns;
            self.slot_busy_ns += out.duration_ns;
            if self.slowdown.is_some() {
                let admitted: usize = out
                    .admitted
                    .iter()
                    .filter_map(|id| self.meta.get(id))
                    .map(|a| a.input_len as usize)
                    .sum();
                let (batch, occupancy) = (out.decode_batch, out.ledger.occupancy_bytes);
                self.observe_speed(admitted, batch, occupancy, out.duration_ns);
            }
            if !self.streamed.is_empty() {
                let at_ns = t + out.duration_ns;
                for &(id, token) in &out.tokens {
                    if self.streamed.contains(&id) {
                        self.token_events.push(TokenEvent { id, at_ns, token });
                    }
                }
            }
            for f in out.finished {
                self.streamed.remove(&f.id);
                let Some(a) = self.meta.remove(&f.id) else {
                    continue;
                };
                let upload_ns = a.arrival_ns.saturating_sub(a.created_ns);
                let wait_ns = f.admitted_at - a.arrival_ns;
                let prefill_ns = f.first_token_at - f.admitted_at;
                let decode_ns = f.finished_at - f.first_token_at;
                done.push(RequestRecord {
                    id: a.id,
                    user: a.user,
                    slot: a.slot,
                    server: self.index,
                    input_len: a.input_len,
                    output_len: a.output_len,
                    upload_ns,
                    wait_ns,
                    prefill_ns,
                    decode_ns,
                    e2e_ns: f.finished_at - a.created_ns,
                    rejected: false,
                });
            }
        }
    }

    /// Closes slot `slot` of length `slot_ns` and reports it.
    pub fn end_slot(&mut self, slot: u64, slot_ns: u64) -> ServerReport {
        let w = self.engine.take_window(slot_ns);
        let l = self.engine.ledger();
        let r = ServerReport {
            server: self.index,
            slot,
            load: SlotLoad {
                eta: w.eta,
                peak_bytes: w.peak_bytes,
                high_kv: w.high_kv,
                occupancy_bytes: l.occupancy_bytes(),
                reserved_bytes: l.reserved_bytes(),
                waiting_kv_bytes: self.engine.waiting_kv_bytes()
                    + self
                        .pending
                        .iter()
                        .flat_map(|b| &b.reqs)
                        .map(|r| l.bytes_for(r.input_len as u64 + r.output_len as u64))
                        .sum::<u64>(),
                backlog: self.backlog(),
                backlog_s: self.backlog_s(),
            },
            iterations: w.iterations,
            busy_ns: self.slot_busy_ns,
        };
        self.slot_busy_ns = 0;
        r
    }

    /// The server crashes at `now_ns` (`actor.kill`): the running batch,
    /// the queue and the batches not yet submitted are dropped, their KV
    /// released in the ledger (and the backend's per-request state), and the
    /// iteration in progress is lost; the core is empty afterwards and
    /// serves whatever it is assigned next, from `now_ns` on.
    pub fn crash(&mut self, now_ns: u64) -> Dropped {
        let mut d = Dropped::default();
        let mut ids: Vec<u64> = self.meta.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let running_before = self.engine.running_len();
            if self.engine.abort(id) {
                if self.engine.running_len() < running_before {
                    d.running.push(id);
                } else {
                    d.queued.push(id);
                }
            }
        }
        self.meta.clear();
        self.streamed.clear();
        self.prompts.clear();
        self.token_events.clear();
        d.pending = self
            .pending
            .drain(..)
            .flat_map(|b| b.reqs)
            .map(|r| r.id)
            .collect();
        d.pending.sort_unstable();
        self.busy_until = now_ns;
        d
    }

    /// No iteration starts before `now_ns`: for a backend that computes in
    /// real time (the live real backend), whose work cannot start in the
    /// past when the server fell behind (a model still loading, a long
    /// forward pass); the delay then shows as wait, as it did in fact.
    pub fn hold_until(&mut self, now_ns: u64) {
        self.busy_until = self.busy_until.max(now_ns);
    }

    /// KV capacity and speed from this server's profile (a real server's
    /// measured one), as its reports carry them.
    /// With [`ServerSlotCore::track_speed`], the speed is scaled by the
    /// slowdown measured since.
    pub fn capability(&self) -> edgemu_policies::lyreo::ServerCapability {
        let mut c = initial_obs(&self.profile, self.bandwidth_hz).capability();
        let f = self.slowdown();
        c.prefill_tok_s /= f;
        c.decode_step_empty_s *= f;
        c.decode_step_full_s *= f;
        c
    }

    /// What a scheduler sees of this server before its first report: the
    /// class figures and `B_s`, an empty state.
    pub fn initial_obs(&self) -> edgemu_policies::lyreo::ServerObs {
        initial_obs(&self.profile, self.bandwidth_hz)
    }

    /// When [`ServerSlotCore::advance`] next has work: the end of the
    /// iteration in progress, or the arrival of the next pending batch when
    /// the engine is idle; `None` when there is nothing to do.
    pub fn next_event_ns(&self) -> Option<u64> {
        if self.engine.is_idle() {
            self.pending
                .front()
                .map(|b| b.ready_ns.max(self.busy_until))
        } else {
            Some(self.busy_until)
        }
    }

    /// Nothing left to do.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.engine.is_idle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_engine::profile::{CurvePoint, DecodeCurve};

    /// α = 1000 B/token, M = 1 MB, prefill 1000 tok/s, decode 10 ms flat.
    fn tiny(mode: BatchMode) -> ServerSlotCore {
        let p = Profile {
            name: "tiny".into(),
            source: String::new(),
            kv_capacity_bytes: 1_000_000,
            kv_bytes_per_token: 1000,
            prefill_tok_s: 1000.0,
            prefill_overhead_s: 0.0,
            decode: vec![DecodeCurve {
                batch: 1,
                points: vec![CurvePoint {
                    kv_bytes: 0,
                    step_s: 0.01,
                }],
            }],
        };
        ServerSlotCore::new(0, p, 10e6, mode)
    }

    #[test]
    fn a_streamed_request_reports_each_token_at_the_end_of_its_iteration() {
        let mut core = tiny(BatchMode::Continuous);
        core.stream(1, Vec::new());
        assert!(core
            .assign(vec![a(1, 0, 100, 5), a(2, 0, 100, 5)])
            .is_empty());
        let mut done = Vec::new();
        core.advance(2_000_000_000, &mut done).expect("advance");
        assert_eq!(done.len(), 2);
        let ev = core.take_token_events();
        // Only request 1's five tokens: the first at the end of the joint
        // prefill (200 tokens at 1000 tok/s), then one per 10 ms step.
        assert_eq!(ev.len(), 5, "{ev:?}");
        assert!(ev.iter().all(|e| e.id == 1));
        let r1 = done.iter().find(|r| r.id == 1).expect("request 1");
        let first = r1.upload_ns + r1.wait_ns + r1.prefill_ns;
        assert_eq!(ev[0].at_ns, first);
        for w in ev.windows(2) {
            assert_eq!(w[1].at_ns - w[0].at_ns, 10_000_000);
        }
        assert_eq!(ev[4].at_ns, r1.e2e_ns);
        assert!(core.take_token_events().is_empty());
        // A crash forgets what was to be streamed.
        core.stream(3, vec![1, 2, 3]);
        core.crash(2_000_000_000);
        assert!(core.assign(vec![a(3, 2, 3, 2)]).is_empty());
        core.advance(4_000_000_000, &mut done).expect("advance");
        assert!(core.take_token_events().is_empty());
    }

    #[test]
    fn a_tracked_server_reports_the_speed_it_runs_at_and_its_backlog_in_seconds() {
        let fast = tiny(BatchMode::Continuous).profile().clone();
        let mut slow = fast.clone();
        slow.prefill_tok_s /= 2.0;
        slow.decode[0].points[0].step_s *= 2.0;
        // The backend runs twice as slow as the profile the core was given.
        let mut core = ServerSlotCore::with_backend(
            0,
            ModeledBackend::new(slow),
            fast.clone(),
            10e6,
            BatchMode::Continuous,
        );
        assert_eq!(core.backlog_s(), 0.0);
        assert!(core.assign(vec![a(1, 0, 100, 50)]).is_empty());
        // Before any iteration: 100 prompt tokens at 1000 tok/s + 50 steps of 10 ms.
        assert!(
            (core.backlog_s() - 0.6).abs() < 1e-9,
            "{}",
            core.backlog_s()
        );
        core.track_speed();
        let mut done = Vec::new();
        core.advance(2_000_000_000, &mut done).expect("advance");
        assert_eq!(done.len(), 1);
        let f = core.slowdown();
        assert!((f - 2.0).abs() < 0.05, "slowdown {f}");
        let c = core.capability();
        assert!((c.prefill_tok_s - fast.prefill_tok_s / f).abs() < 1e-9);
        assert!((c.decode_step_empty_s - 0.01 * f).abs() < 1e-12);
        assert!(core.assign(vec![a(2, 2_000_000_000, 100, 50)]).is_empty());
        assert!((core.backlog_s() - 0.6 * f).abs() < 1e-9);
        // Untracked, the profile is taken as is.
        assert_eq!(tiny(BatchMode::Continuous).slowdown(), 1.0);
    }

    fn a(id: u64, arrival_ns: u64, lin: u32, lout: u32) -> Assigned {
        Assigned {
            id,
            user: id as usize,
            slot: 0,
            created_ns: 0,
            arrival_ns,
            input_len: lin,
            output_len: lout,
        }
    }

    #[test]
    fn held_until_now_a_late_server_counts_the_delay_as_wait() {
        let mut s = tiny(BatchMode::Continuous);
        assert!(s.assign(vec![a(1, 1_000_000, 100, 2)]).is_empty());
        assert_eq!(s.next_event_ns(), Some(1_000_000));
        // The server only gets to run at 50 ms (say, its model was loading).
        s.hold_until(50_000_000);
        let mut done = Vec::new();
        s.advance(u64::MAX, &mut done).unwrap();
        assert_eq!(done.len(), 1);
        // Prefill of 100 tokens at 1000 tok/s starts at 50 ms, not at 1 ms.
        assert_eq!(done[0].wait_ns, 49_000_000);
        assert_eq!(done[0].prefill_ns, 100_000_000);
        assert_eq!(s.next_event_ns(), None);
    }

    #[test]
    fn eta_and_high_kv_on_a_hand_built_slot() {
        let mut s = tiny(BatchMode::Continuous);
        // Two requests, uploads end at 1 ms and 2 ms; prefilled together at 2 ms.
        let rej = s.assign(vec![a(1, 1_000_000, 100, 3), a(2, 2_000_000, 300, 2)]);
        assert!(rej.is_empty());
        let mut done = Vec::new();
        s.advance(1_000_000_000, &mut done).unwrap();
        // it 0 (prefill 400 tok = 0.4 s, from 2 ms): holds 101 + 301 = 402 tok.
        // it 1 (10 ms): 102 + 302 = 404 tok; request 2 done (2 tokens).
        // it 2 (10 ms): 103 tok; request 1 done.
        // memory-time = 402e3·0.4 + 404e3·0.01 + 103e3·0.01 = 165 870 B·s
        // η = 165 870 / (1e6 · 1 s)
        let r = s.end_slot(0, 1_000_000_000);
        let (l, iterations) = (r.load, r.iterations);
        assert!((l.eta - 0.16587).abs() < 1e-12, "{}", l.eta);
        assert_eq!(l.peak_bytes, 404_000);
        assert!(!l.high_kv);
        assert_eq!(iterations, 3);
        assert_eq!(l.backlog, 0);
        done.sort_by_key(|d| d.id);
        let d1 = done[0];
        assert_eq!(d1.upload_ns, 1_000_000);
        assert_eq!(d1.wait_ns, 1_000_000, "waits for the slot's last upload");
        assert_eq!(d1.prefill_ns, 400_000_000);
        assert_eq!(d1.decode_ns, 20_000_000);
        assert_eq!(d1.e2e_ns, 2_000_000 + 400_000_000 + 20_000_000);
        assert_eq!(done[1].decode_ns, 10_000_000);

        // High KV: one request holding 950 tokens of the 1000-token capacity.
        let mut s = tiny(BatchMode::Continuous);
        s.assign(vec![a(3, 0, 940, 10)]);
        s.advance(2_000_000_000, &mut done).unwrap();
        let l = s.end_slot(0, 2_000_000_000).load;
        assert_eq!(l.peak_bytes, 950_000);
        assert!(l.high_kv);
        // 941e3·0.94 + (942..=950)e3·0.01 = 884 540 + 85 140 = 969 680 B·s over 2 MB·s
        assert!((l.eta - 969_680.0 / 2e6).abs() < 1e-9, "{}", l.eta);
    }

    #[test]
    fn a_crash_drops_everything_and_frees_the_kv() {
        let mut s = tiny(BatchMode::Continuous);
        // 1 and 2 (600 tokens each) cannot run together: 2 waits for KV.
        s.assign(vec![a(1, 0, 500, 100), a(2, 0, 500, 100)]);
        // 3 arrives later, in its own batch.
        s.assign(vec![a(3, 5_000_000_000, 10, 10)]);
        let mut done = Vec::new();
        s.advance(600_000_000, &mut done).unwrap();
        assert!(done.is_empty());
        assert!(s.engine.ledger().reserved_bytes() > 0);
        let d = s.crash(600_000_000);
        assert_eq!(
            d,
            Dropped {
                running: vec![1],
                queued: vec![2],
                pending: vec![3]
            }
        );
        assert_eq!(d.len(), 3);
        assert_eq!(s.engine.ledger().reserved_bytes(), 0);
        assert_eq!(s.engine.ledger().occupancy_bytes(), 0);
        assert!(s.is_idle() && s.backlog() == 0);
        // It serves again, from the crash on; ids of dropped requests are free.
        assert!(s.assign(vec![a(1, 700_000_000, 10, 2)]).is_empty());
        s.advance(u64::MAX, &mut done).unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].wait_ns, 0);
        assert!(s.crash(2_000_000_000).is_empty());
    }

    #[test]
    fn never_fitting_request_is_a_counted_rejection() {
        let mut s = tiny(BatchMode::Continuous);
        let rej = s.assign(vec![a(1, 5, 900, 200), a(2, 5, 10, 10)]);
        assert_eq!(rej.len(), 1);
        assert!(rej[0].rejected && rej[0].id == 1);
        let mut done = Vec::new();
        s.advance(1_000_000_000, &mut done).unwrap();
        assert_eq!(done.len(), 1);
        assert!(s.is_idle());
    }

    /// What the engine would refuse (zero lengths, an id in use) is a
    /// per-request rejection; the server goes on serving the others.
    #[test]
    fn malformed_or_repeated_requests_are_rejections_not_engine_failures() {
        let mut s = tiny(BatchMode::Continuous);
        let rej = s.assign(vec![
            a(1, 5, 10, 10),
            a(2, 5, 0, 10),
            a(3, 5, 10, 0),
            a(1, 5, 10, 10),
        ]);
        let mut ids: Vec<u64> = rej.iter().map(|r| r.id).collect();
        ids.sort();
        assert_eq!(ids, vec![1, 2, 3], "zero lengths and the repeated id 1");
        // Id 1 is still pending: a later slot reusing it is refused too.
        assert_eq!(s.assign(vec![a(1, 6, 10, 10)]).len(), 1);
        let mut done = Vec::new();
        s.advance(1_000_000_000, &mut done)
            .expect("the engine never fails");
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].id, 1);
        assert!(s.is_idle());
    }

    #[test]
    fn requests_wait_for_kv_and_static_batches_hold() {
        // 600 + 600 tokens do not fit together in 1000: the second waits.
        let mut s = tiny(BatchMode::Continuous);
        s.assign(vec![a(1, 0, 500, 100), a(2, 0, 500, 100)]);
        let mut done = Vec::new();
        s.advance(10_000_000_000, &mut done).unwrap();
        done.sort_by_key(|d| d.id);
        assert_eq!(done[0].wait_ns, 0);
        // 1: prefill 0.5 s + 99 decodes → leaves at 1.49 s; 2 admitted then.
        assert_eq!(done[1].wait_ns, 1_490_000_000);
        // Static: a later batch cannot join a running one.
        let mut s = tiny(BatchMode::Static);
        s.assign(vec![a(1, 0, 10, 50)]);
        let mut done = Vec::new();
        s.advance(100_000_000, &mut done).unwrap();
        s.assign(vec![a(2, 100_000_000, 10, 5)]);
        s.advance(10_000_000_000, &mut done).unwrap();
        done.sort_by_key(|d| d.id);
        // 1 leaves at 0.01 + 49·0.01 = 0.5 s; 2 arrives at 0.1 s and waits.
        assert_eq!(done[1].wait_ns, 400_000_000);
    }
}
