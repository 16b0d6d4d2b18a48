//! [`SlotStepper`]: the slotted harness one slot at a time, with the slot's
//! assignment given from outside — the core of the `LyreoScheduling`
//! Gymnasium environment, and the loop [`crate::run_episode_with`] runs.
//!
//! After [`SlotStepper::new`] the stepper holds slot 0's observation (users
//! placed and moved, requests drawn, the scheduler's view built).
//! [`SlotStepper::step`] takes an assignment of every request (or lets the
//! fallback policy assign), runs the servers to the end of the slot, closes
//! the slot in the Lyapunov queues, returns the slot's reward and builds the
//! next slot's observation. After `T` slots the servers drain and the episode
//! is done; [`SlotStepper::finish`] gives the same [`EpisodeOutcome`] as a
//! whole-episode run.
//!
//! **Reward** (paper eq. 30, divided by U, LYREO's load term):
//! `r_t = −(ν Σ_{i completed in slot t} D_i + Σ_s Z_s(t) Y_s(t) + ϱ Υ(t)) / U`
//! with `Z_s(t)` the queue before slot `t`'s update, `Y_s(t)` its deviation
//! and `Υ(t)` the servers over 90 % KV in the slot plus the slot's requests
//! rejected as never fitting. A request's latency is credited in the slot
//! in which it completes; at the last slot, the latency of every request
//! that finishes in the drain is added, so an episode's return counts every
//! request once (the trainer's `slot_rewards` with the drain lumped).

use edgemu_engine::batch::BatchMode;
use edgemu_engine::Profile;
use edgemu_policies::lyreo::{SchedulingPolicy, ServerBatching, SlotObservation};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::harness::{summarize, Scenario, ServerSlotRow};
use crate::mobility::UserMotion;
use crate::radio;
use crate::scheduler::{SchedulerCore, SchedulerSettings, ServerSite, SlotRequest};
use crate::server::{Assigned, RequestRecord, ServerReport, ServerSlotCore};
use crate::{EpisodeOutcome, ServingError, NS_PER_S};
use rayon::prelude::*;

/// Weight `ϱ` of the high-KV and rejection count in the reward (the
/// trainer's default).
pub const REWARD_RHO: f64 = 1.0;

/// What one slot gave.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SlotStep {
    /// Eq. 30's reward of the slot (see the module doc).
    pub reward: f64,
    /// The episode is over (the last slot was stepped; servers drained).
    pub done: bool,
    /// Requests completed in the slot (with the drain at the last one).
    pub completed: usize,
    /// Their end-to-end latencies summed, seconds.
    pub latency_sum_s: f64,
    /// Requests rejected in the slot (never fitting a server's KV).
    pub rejected: usize,
    /// `Σ_s Z_s(t) Y_s(t)` of the slot.
    pub drift: f64,
    /// Mean over servers of `Y_s(t) = (η_s − η̄)²`.
    pub lb_dev: f64,
    /// Servers over 90 % KV in the slot.
    pub high_kv: usize,
    /// Requests moved off unavailable servers.
    pub moved: usize,
}

struct User {
    motion: UserMotion,
    power_w: f64,
}

fn stream(seed: u64, k: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(k);
    r
}

/// One episode of a [`Scenario`], stepped a slot at a time.
pub struct SlotStepper {
    sc: Scenario,
    policy_name: String,
    classes: Vec<&'static str>,
    servers: Vec<ServerSlotCore>,
    users: Vec<User>,
    sched: SchedulerCore,
    move_rng: ChaCha8Rng,
    work_rng: ChaCha8Rng,
    /// The slot the held observation is of (`T` once done).
    t: u64,
    next_id: u64,
    requests: Vec<SlotRequest>,
    per_server: Vec<Vec<Assigned>>,
    records: Vec<RequestRecord>,
    /// Records already credited to a slot's reward.
    credited: usize,
    /// Latencies of completed requests whose completion slot is still ahead
    /// (completion at a slot's exact end), by completion slot.
    pending: Vec<(u64, f64)>,
    rows: Vec<ServerSlotRow>,
    decisions: u64,
    done: bool,
}

impl SlotStepper {
    /// Lays out `scenario` (servers, users, streams) and observes slot 0.
    /// `fallback` assigns whenever [`SlotStepper::step`] gets no assignment;
    /// `batching` is the servers' (the paper's Static arm batches
    /// statically); `name` labels the outcome's summary.
    pub fn new(
        scenario: &Scenario,
        batching: ServerBatching,
        fallback: Box<dyn SchedulingPolicy>,
        name: &str,
    ) -> Result<Self, ServingError> {
        scenario.check()?;
        let sc = scenario.clone();
        let mut topo = stream(sc.seed, 1);
        let mode = match batching {
            ServerBatching::Continuous => BatchMode::Continuous,
            ServerBatching::Static => BatchMode::Static,
        };
        let classes = sc.mix.classes(sc.servers);
        let mut servers = Vec::with_capacity(sc.servers);
        let mut server_pos = Vec::with_capacity(sc.servers);
        for (i, class) in classes.iter().enumerate() {
            let mut profile = Profile::builtin(class).map_err(|source| ServingError::Engine {
                server: i,
                source: Box::new(source),
            })?;
            profile.kv_capacity_bytes =
                ((profile.kv_capacity_bytes as f64 * sc.kv_budget_share) as u64).max(1);
            let (lo, hi) = sc.bandwidth_hz;
            let bw = lo + topo.random::<f64>() * (hi - lo);
            server_pos.push(sc.area.uniform(&mut topo));
            servers.push(ServerSlotCore::new(i, profile, bw, mode));
        }
        let users: Vec<User> = (0..sc.users)
            .map(|_| {
                let (lo, hi) = sc.power_dbm;
                let dbm = lo + topo.random::<f64>() * (hi - lo);
                User {
                    motion: UserMotion::new(sc.area.uniform(&mut topo)),
                    power_w: radio::dbm_to_w(dbm),
                }
            })
            .collect();
        let sites = servers
            .iter()
            .zip(&server_pos)
            .map(|(s, &position)| ServerSite {
                position,
                obs: s.initial_obs(),
            })
            .collect();
        let settings = SchedulerSettings {
            slot_ns: sc.slot_ns,
            epsilon: sc.epsilon,
            nu: sc.nu,
            // Every server reports every slot here: nothing times out.
            report_timeout_ns: u64::MAX,
        };
        let sched = SchedulerCore::new(sites, settings, fallback);
        let mut stepper = SlotStepper {
            policy_name: name.to_string(),
            classes,
            per_server: vec![Vec::new(); sc.servers],
            servers,
            users,
            sched,
            move_rng: stream(sc.seed, 2),
            work_rng: stream(sc.seed, 3),
            t: 0,
            next_id: 0,
            requests: Vec::with_capacity(sc.users),
            records: Vec::with_capacity(sc.users * sc.slots as usize),
            credited: 0,
            pending: Vec::new(),
            rows: Vec::with_capacity(sc.servers * sc.slots as usize),
            decisions: 0,
            done: false,
            sc,
        };
        stepper.observe_slot();
        Ok(stepper)
    }

    /// The scenario being run.
    pub fn scenario(&self) -> &Scenario {
        &self.sc
    }

    /// The slot the held observation is of.
    pub fn slot(&self) -> u64 {
        self.t
    }

    /// Whether the episode is over.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The current slot's observation (the last slot's once done).
    pub fn observation(&mut self) -> &SlotObservation {
        self.sched
            .observation()
            .expect("a stepper always holds an observation")
    }

    /// Users move (after slot 0), each sends one request, the scheduler
    /// observes them.
    fn observe_slot(&mut self) {
        let sc = &self.sc;
        let dt_s = sc.slot_ns as f64 / NS_PER_S as f64;
        self.requests.clear();
        for (u, user) in self.users.iter_mut().enumerate() {
            if self.t > 0 {
                user.motion
                    .advance(&sc.mobility, &sc.area, dt_s, &mut self.move_rng);
            }
            let (lin, lout) = sc.workload.sample(&mut self.work_rng);
            self.requests.push(SlotRequest {
                id: self.next_id,
                user: u,
                input_len: lin,
                output_len: lout,
                position: user.motion.pos,
                power_w: user.power_w,
            });
            self.next_id += 1;
        }
        self.sched.observe(self.t, &self.requests);
    }

    /// Decides the current slot with `assignment` (one server per request;
    /// `None`: the fallback policy assigns), runs it, and observes the next.
    /// A server's error ends the episode (reset to go on).
    pub fn step(&mut self, assignment: Option<&[usize]>) -> Result<SlotStep, ServingError> {
        if self.done {
            return Err(ServingError::Invalid(
                "the episode is over: reset before stepping again".into(),
            ));
        }
        let sc = &self.sc;
        let t = self.t;
        let decision = match assignment {
            None => self.sched.decide_observed(),
            Some(a) => self
                .sched
                .place(a)
                .map_err(|e| ServingError::Invalid(format!("slot {t}'s assignment: {e}")))?,
        };
        self.decisions += decision.placements.len() as u64;
        let start = t * sc.slot_ns;
        for (q, p) in self.requests.iter().zip(&decision.placements) {
            self.per_server[p.server].push(Assigned {
                id: q.id,
                user: q.user,
                slot: t,
                created_ns: start,
                arrival_ns: start.saturating_add(p.upload_ns),
                input_len: q.input_len,
                output_len: q.output_len,
            });
        }
        let end = start + sc.slot_ns;
        let slot_ns = sc.slot_ns;
        // The servers' slots are independent: they run on every core, and
        // their records join in server order, as if run one after another.
        let served: Vec<Result<(Vec<RequestRecord>, ServerReport), ServingError>> = self
            .servers
            .par_iter_mut()
            .zip(self.per_server.par_iter_mut())
            .map(|(server, assigned)| {
                let mut records = server.assign(std::mem::take(assigned));
                server.advance(end, &mut records)?;
                Ok((records, server.end_slot(t, slot_ns)))
            })
            .collect();
        // A server's error ends the episode: the other servers have run
        // their slot already, so stepping on would not be this slot again.
        if served.iter().any(Result::is_err) {
            self.done = true;
        }
        let mut reports = Vec::with_capacity(sc.servers);
        for (s, served) in served.into_iter().enumerate() {
            let (records, r) = served?;
            self.records.extend(records);
            self.sched
                .report(s, t, r.load, None, end)
                .map_err(|e| ServingError::Report {
                    server: s,
                    slot: t,
                    reason: e,
                })?;
            reports.push(r);
        }
        let z_before = self.sched.queues().z().to_vec();
        let y = self.sched.end_slot();
        let z = self.sched.queues().z();
        let mut out = SlotStep {
            moved: decision.moved,
            ..SlotStep::default()
        };
        for (s, r) in reports.into_iter().enumerate() {
            out.drift += z_before[s] * y[s];
            out.lb_dev += y[s];
            out.high_kv += usize::from(r.load.high_kv);
            self.rows.push(ServerSlotRow {
                class: self.classes[s],
                capacity_bytes: self.sched.sites()[s].obs.capacity_bytes,
                assigned: decision.per_server[s],
                y: y[s],
                z: z[s],
                report: r,
            });
        }
        out.lb_dev /= sc.servers as f64;
        self.t += 1;
        if self.t == sc.slots {
            // Drain: unfinished requests run to completion, credited now.
            let drained: Vec<Result<Vec<RequestRecord>, ServingError>> = self
                .servers
                .par_iter_mut()
                .map(|server| {
                    let mut records = Vec::new();
                    server.advance(u64::MAX, &mut records)?;
                    Ok(records)
                })
                .collect();
            for records in drained {
                self.records.extend(records?);
            }
            self.done = true;
        }
        self.credit(t, &mut out);
        let sc = &self.sc;
        out.reward = -(sc.nu * out.latency_sum_s
            + out.drift
            + REWARD_RHO * (out.high_kv + out.rejected) as f64)
            / sc.users as f64;
        out.done = self.done;
        if !self.done {
            self.observe_slot();
        }
        Ok(out)
    }

    /// Credits slot `t` with the requests completed in it (every one left
    /// once done) and the slot's rejections.
    fn credit(&mut self, t: u64, out: &mut SlotStep) {
        let slot_s = self.sc.slot_ns as f64 / NS_PER_S as f64;
        for r in &self.records[self.credited..] {
            if r.rejected {
                out.rejected += 1;
                continue;
            }
            let e2e = r.e2e_ns as f64 / NS_PER_S as f64;
            self.pending.push((r.slot + (e2e / slot_s) as u64, e2e));
        }
        self.credited = self.records.len();
        let done = self.done;
        self.pending.retain(|&(at, e2e)| {
            let now = done || at <= t;
            if now {
                out.completed += 1;
                out.latency_sum_s += e2e;
            }
            !now
        });
    }

    /// The episode's records, rows and summary (call once done; before
    /// that, the slots stepped so far).
    pub fn finish(mut self) -> EpisodeOutcome {
        self.records.sort_by_key(|r| r.id);
        let summary = summarize(
            &self.policy_name,
            self.sc.seed,
            &self.records,
            &self.rows,
            self.decisions,
        );
        EpisodeOutcome {
            requests: self.records,
            server_slots: self.rows,
            summary,
            fallbacks: self.sched.fallbacks(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_episode;
    use crate::train::{rewards::slot_rewards, TrainConfig};
    use edgemu_policies::lyreo::{PolicySpec, Variant};

    fn small(seed: u64) -> Scenario {
        let mut s = Scenario::paper_default(seed);
        s.users = 12;
        s.servers = 4;
        s.slots = 25;
        s
    }

    #[test]
    fn stepping_with_the_fallback_is_the_whole_episode_run() {
        for name in ["least-loaded", "random", "static"] {
            let spec = PolicySpec::parse(name).unwrap();
            let sc = small(3);
            let whole = run_episode(&sc, &spec).unwrap();
            let mut st =
                SlotStepper::new(&sc, spec.batching, spec.build(sc.seed ^ 0x5eed), name).unwrap();
            let mut steps = 0;
            while !st.is_done() {
                st.step(None).unwrap();
                steps += 1;
            }
            assert_eq!(steps, 25);
            assert!(st.step(None).is_err(), "stepping past the end");
            let o = st.finish();
            assert_eq!(
                crate::harness::episode_csvs(&o),
                crate::harness::episode_csvs(&whole)
            );
        }
    }

    #[test]
    fn an_outside_assignment_is_placed_as_given_and_checked() {
        let sc = small(4);
        let spec = PolicySpec::parse("least-loaded").unwrap();
        let mut st = SlotStepper::new(&sc, spec.batching, spec.build(1), "outside").unwrap();
        assert!(st.step(Some(&[0; 11])).is_err(), "one server short");
        assert!(st.step(Some(&[4; 12])).is_err(), "no server 4");
        // Everything on server 2, every slot.
        while !st.is_done() {
            assert_eq!(st.observation().requests.len(), 12);
            st.step(Some(&[2; 12])).unwrap();
        }
        let o = st.finish();
        assert!(o.requests.iter().all(|r| r.server == 2));
    }

    #[test]
    fn rewards_sum_to_the_trainers_slot_rewards() {
        let sc = small(5);
        let spec = PolicySpec::parse("random").unwrap();
        let mut st = SlotStepper::new(&sc, spec.batching, spec.build(9), "random").unwrap();
        let mut rewards = Vec::new();
        let mut completed = 0;
        while !st.is_done() {
            let s = st.step(None).unwrap();
            rewards.push(s.reward);
            completed += s.completed + s.rejected;
        }
        let o = st.finish();
        assert_eq!(completed, o.requests.len(), "every request credited once");
        let cfg = TrainConfig::new(Variant::Lyreo);
        let trainer = slot_rewards(&cfg, &sc, &o);
        assert_eq!(trainer.len(), rewards.len());
        for (t, (a, b)) in rewards.iter().zip(&trainer).enumerate() {
            assert!(
                (*a as f32 - b).abs() <= 1e-4 * b.abs().max(1.0),
                "slot {t}: {a} vs {b}"
            );
        }
        assert!(rewards.iter().any(|r| *r < 0.0));
    }
}
