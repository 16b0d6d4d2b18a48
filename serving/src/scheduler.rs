//! The request-scheduler core: one slot's decision and the Lyapunov
//! virtual queues, used by the slotted harness and by the scheduler actor.
//!
//! The core holds what a scheduler knows of its servers — where each is
//! ([`ServerSite`]), its capability and its latest report — and, each slot,
//! turns the requests its users sent ([`SlotRequest`]) into placements
//! ([`Placement`]): it builds the policy's [`SlotObservation`] (each
//! request's full-band Shannon rate to every server, left out for a policy
//! that does not read rates), asks its
//! [`SchedulingPolicy`] for one server per request, and gives each request
//! the rate of its server's cell shared by the slot's requests there, and
//! its upload time. After the slot it updates the virtual queues (paper §IV-A)
//!
//! `Z_s(t+1) = max(Z_s(t) + Y_s(t) − ε, 0)`, `Y_s(t) = (η_s(t) − η̄(t))²`,
//!
//! where `η̄` is the mean workload over servers.
//!
//! **Reports** ([`SchedulerCore::report`]) carry a server's slot load and,
//! from a real server, its measured capability (speed and KV), which
//! replaces the class figures the scheduler started from. A report with a
//! workload that is not finite or is negative, or older than the one held,
//! is refused: it would poison the queues for the rest of the run. (A
//! workload above 1 is real: an iteration that runs past the slot's end
//! counts its memory-time in that slot.)
//!
//! **Unavailable servers** (see [`crate::availability`]: no report for a
//! timeout, e.g. a killed server): the policy still gets every server —
//! learned policies have a fixed number S of inputs — but an unavailable
//! one is shown full (occupancy, reservation and queued KV at `M_s`, high
//! KV, η = 1), and any request the policy still gives it is moved to the
//! available server with the fewest requests of the slot so far (lowest
//! index on a tie), so nothing is assigned to a server known to be down.
//! With no server available the policy's choice stands (the requests fail
//! at the dead servers). In the queues, `η̄` is the mean over available
//! servers and an unavailable server's `Z_s` is held
//! ([`LyapunovQueues::update_available`]). A server whose report is late
//! counts with its last known workload. The queues themselves live in
//! `edgemu_policies::lyreo` (LYREO-Count's policy keeps its own count-based
//! ones with the same code).

pub use edgemu_policies::lyreo::LyapunovQueues;
use edgemu_policies::lyreo::{
    RequestObs, SchedulingPolicy, ServerCapability, ServerObs, SlotLoad, SlotObservation,
};

use crate::availability::{Availability, AvailabilityChange};
use crate::mobility::Position;
use crate::radio;
use rayon::prelude::*;

/// Request × server pairs from which a slot's solo rates are computed in
/// parallel (below, spreading the work costs more than it saves).
const PARALLEL_RATES: usize = 1 << 15;

/// A server as its scheduler knows it: where it is and what it can do
/// (its class figures and bandwidth `B_s`; the load part is overwritten by
/// its reports).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSite {
    pub position: Position,
    pub obs: ServerObs,
}

/// One request as its user sent it for the slot's decision.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotRequest {
    pub id: u64,
    pub user: usize,
    pub input_len: u32,
    pub output_len: u32,
    /// Where the user was, and its transmit power, when it sent it.
    pub position: Position,
    pub power_w: f64,
}

/// Where one request goes and how fast it uploads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    pub server: usize,
    /// Shannon rate of the server's cell shared by the slot's requests there.
    pub rate_bps: f64,
    /// Transmission time of the prompt at that rate, ns.
    pub upload_ns: u64,
}

/// The decision of one slot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotDecision {
    /// One per request, in the order given.
    pub placements: Vec<Placement>,
    /// Requests placed on each server.
    pub per_server: Vec<usize>,
    /// Requests the policy gave an unavailable server, moved.
    pub moved: usize,
}

/// Why a report was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReportRefused {
    #[error("no server {0} at this scheduler")]
    UnknownServer(usize),
    #[error("workload η is not a finite, non-negative number")]
    BadWorkload,
    #[error("older than the report held")]
    Stale,
    #[error("capability figures not finite and positive")]
    BadCapability,
}

/// Why an outside assignment was not placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PlacementRefused {
    #[error("no slot has been observed")]
    NothingObserved,
    #[error("{got} servers for {expected} requests")]
    WrongLength { expected: usize, got: usize },
    #[error("request {index}: no server {server}")]
    NoSuchServer { index: usize, server: usize },
}

/// The scheduler: its servers, their reports and availability, the
/// Lyapunov queues and the policy.
pub struct SchedulerCore {
    queues: LyapunovQueues,
    policy: Box<dyn SchedulingPolicy>,
    assignment: Vec<usize>,
    sites: Vec<ServerSite>,
    /// Latest report (slot, load) of each server.
    reports: Vec<Option<(u64, SlotLoad)>>,
    availability: Availability,
    slot_s: f64,
    epsilon: f64,
    nu: f64,
    /// The observation of the slot being decided and its requests.
    observed: Option<SlotObservation>,
    observed_requests: Vec<SlotRequest>,
}

/// The slot length and the policy parameters a scheduler runs with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedulerSettings {
    /// Slot length Δ, ns.
    pub slot_ns: u64,
    /// Load-balancing tolerance `ε`.
    pub epsilon: f64,
    /// Drift-plus-penalty weight `ν`.
    pub nu: f64,
    /// A server silent this long is unavailable, ns.
    pub report_timeout_ns: u64,
}

impl SchedulerCore {
    pub fn new(
        sites: Vec<ServerSite>,
        settings: SchedulerSettings,
        policy: Box<dyn SchedulingPolicy>,
    ) -> Self {
        let n = sites.len();
        SchedulerCore {
            queues: LyapunovQueues::new(n, settings.epsilon),
            policy,
            assignment: Vec::new(),
            reports: vec![None; n],
            availability: Availability::new(n, settings.report_timeout_ns),
            sites,
            slot_s: settings.slot_ns as f64 / crate::NS_PER_S as f64,
            epsilon: settings.epsilon,
            nu: settings.nu,
            observed: None,
            observed_requests: Vec::new(),
        }
    }

    pub fn queues(&self) -> &LyapunovQueues {
        &self.queues
    }

    pub fn sites(&self) -> &[ServerSite] {
        &self.sites
    }

    /// Which servers are available (see [`crate::availability`]).
    pub fn available(&self) -> &[bool] {
        self.availability.mask()
    }

    /// Replaces the policy (a hot swap, at a decision boundary); the
    /// Lyapunov queues carry on.
    pub fn set_policy(&mut self, policy: Box<dyn SchedulingPolicy>) {
        self.policy = policy;
    }

    pub fn policy_name(&self) -> &str {
        self.policy.name()
    }

    /// Requests the policy's guard placed with its fallback since it was
    /// set (see `SchedulingPolicy::fallbacks`).
    pub fn fallbacks(&self) -> u64 {
        self.policy.fallbacks()
    }

    /// Server `server`'s report of slot `slot`, received at `now_ns`; with
    /// `capability`, the figures it measured of itself.
    pub fn report(
        &mut self,
        server: usize,
        slot: u64,
        load: SlotLoad,
        capability: Option<&ServerCapability>,
        now_ns: u64,
    ) -> Result<(), ReportRefused> {
        let held = self
            .reports
            .get(server)
            .ok_or(ReportRefused::UnknownServer(server))?;
        if !(load.eta.is_finite() && load.eta >= 0.0) {
            return Err(ReportRefused::BadWorkload);
        }
        if held.is_some_and(|(s, _)| s > slot) {
            return Err(ReportRefused::Stale);
        }
        if let Some(c) = capability {
            if !c.is_valid() {
                return Err(ReportRefused::BadCapability);
            }
            self.sites[server].obs.set_capability(c);
        }
        self.reports[server] = Some((slot, load));
        self.availability.report(server, now_ns);
        Ok(())
    }

    /// The scheduler starts at `now_ns`: a server that has not reported a
    /// timeout later is unavailable until it does (see
    /// [`crate::availability`]).
    pub fn start(&mut self, now_ns: u64) {
        self.availability.reset(now_ns);
    }

    /// Re-evaluates availability at `now_ns` (once per decision); returns
    /// the servers whose availability changed.
    pub fn update_availability(&mut self, now_ns: u64) -> Vec<AvailabilityChange> {
        self.availability.update(now_ns)
    }

    /// Closes a slot in the queues with the servers' latest reported
    /// workloads (a server that never reported counts 0; an unavailable one
    /// not at all); returns `Y_s`.
    pub fn end_slot(&mut self) -> Vec<f64> {
        let etas: Vec<f64> = self
            .reports
            .iter()
            .map(|r| r.map_or(0.0, |(_, l)| l.eta))
            .collect();
        self.queues
            .update_available(&etas, self.availability.mask())
    }

    /// Decides slot `slot` for `requests` with the core's policy (see the
    /// module doc): [`SchedulerCore::observe`] then
    /// [`SchedulerCore::decide_observed`].
    pub fn decide(&mut self, slot: u64, requests: &[SlotRequest]) -> SlotDecision {
        self.observe(slot, requests);
        self.decide_observed()
    }

    /// Builds and keeps slot `slot`'s observation of `requests` (the
    /// servers' latest reports, the queues, and each request's solo rate to
    /// every server, computed when first needed: by
    /// [`SchedulerCore::observation`], or by a policy that reads rates); a
    /// decision for it follows with [`SchedulerCore::decide_observed`] or
    /// [`SchedulerCore::place`]. The split lets a shell ask a policy outside
    /// the process and fall back to the core's own policy on the same
    /// observation ([`SchedulerCore::observe_with_rates`]).
    pub fn observe(&mut self, slot: u64, requests: &[SlotRequest]) {
        let obs = self.build_observation(slot, requests);
        self.observed = Some(obs);
    }

    /// [`SchedulerCore::observe`], then the observation with its solo rates
    /// (what a policy outside the process is shown).
    pub fn observe_with_rates(&mut self, slot: u64, requests: &[SlotRequest]) -> &SlotObservation {
        let obs = self.build_observation(slot, requests);
        let obs = self.observed.insert(obs);
        fill_rates(obs, &self.observed_requests, &self.sites);
        obs
    }

    /// Slot `slot`'s observation of `requests`, without solo rates; keeps
    /// the requests for the rates and the placements.
    fn build_observation(&mut self, slot: u64, requests: &[SlotRequest]) -> SlotObservation {
        for (site, r) in self.sites.iter_mut().zip(&self.reports) {
            if let Some((_, load)) = r {
                site.obs.load = *load;
            }
        }
        let mut obs = SlotObservation {
            slot,
            slot_s: self.slot_s,
            requests: requests
                .iter()
                .map(|q| RequestObs {
                    id: q.id,
                    user: q.user,
                    input_len: q.input_len,
                    output_len: q.output_len,
                    solo_rate_bps: Vec::new(),
                })
                .collect(),
            servers: self.sites.iter().map(|s| s.obs.clone()).collect(),
            z: self.queues.z().to_vec(),
            epsilon: self.epsilon,
            nu: self.nu,
        };
        self.mask_unavailable(&mut obs);
        self.observed_requests.clear();
        self.observed_requests.extend_from_slice(requests);
        obs
    }

    /// The observation kept by the last [`SchedulerCore::observe`], its
    /// solo rates computed.
    pub fn observation(&mut self) -> Option<&SlotObservation> {
        let obs = self.observed.as_mut()?;
        fill_rates(obs, &self.observed_requests, &self.sites);
        Some(obs)
    }

    /// The core's own policy decides the observed slot (no observation: an
    /// empty decision).
    pub fn decide_observed(&mut self) -> SlotDecision {
        let Some(mut obs) = self.observed.take() else {
            return SlotDecision::default();
        };
        if self.policy.reads_rates() {
            fill_rates(&mut obs, &self.observed_requests, &self.sites);
        }
        let moved = self.assign_available(&obs);
        self.observed = Some(obs);
        self.placements(moved)
    }

    /// Places the observed slot's requests as `assignment` says (one server
    /// per request, from a policy outside the core). A request on an
    /// unavailable server is moved as the core's own policy's would be.
    pub fn place(&mut self, assignment: &[usize]) -> Result<SlotDecision, PlacementRefused> {
        let Some(obs) = &self.observed else {
            return Err(PlacementRefused::NothingObserved);
        };
        let (requests, servers) = (obs.requests.len(), obs.servers.len());
        if assignment.len() != requests {
            return Err(PlacementRefused::WrongLength {
                expected: requests,
                got: assignment.len(),
            });
        }
        if let Some((index, &server)) = assignment.iter().enumerate().find(|(_, &s)| s >= servers) {
            return Err(PlacementRefused::NoSuchServer { index, server });
        }
        self.assignment.clear();
        self.assignment.extend_from_slice(assignment);
        let moved = self.move_off_unavailable();
        Ok(self.placements(moved))
    }

    /// The decision for the observed requests and `self.assignment`.
    fn placements(&self, moved: usize) -> SlotDecision {
        let mut per_server = vec![0usize; self.sites.len()];
        for &s in &self.assignment {
            per_server[s] += 1;
        }
        let placements = self
            .observed_requests
            .iter()
            .zip(&self.assignment)
            .map(|(q, &s)| {
                let site = &self.sites[s];
                let d2 = q.position.distance_squared(&site.position);
                let rate =
                    radio::uplink_rate_bps(site.obs.bandwidth_hz, per_server[s], q.power_w, d2);
                Placement {
                    server: s,
                    rate_bps: rate,
                    upload_ns: radio::upload_ns(q.input_len, rate),
                }
            })
            .collect();
        SlotDecision {
            placements,
            per_server,
            moved,
        }
    }

    /// Back from a kill: fresh Lyapunov queues, no reports, every server
    /// available and seen at `now_ns`, server loads as at the start; the
    /// policy and the capabilities learned from reports stay.
    pub fn restart(&mut self, now_ns: u64) {
        self.queues = LyapunovQueues::new(self.queues.z().len(), self.queues.epsilon());
        self.reports.iter_mut().for_each(|r| *r = None);
        self.availability.reset(now_ns);
        for s in &mut self.sites {
            s.obs.load = SlotLoad::default();
        }
    }

    /// The policy's assignment, clamped to valid servers (an out-of-range
    /// choice goes to server 0 — policies must not produce one; the tests
    /// hold them to it).
    fn assign(&mut self, obs: &SlotObservation) {
        self.policy.assign(obs, &mut self.assignment);
        let n = obs.servers.len();
        self.assignment.resize(obs.requests.len(), 0);
        for s in &mut self.assignment {
            if *s >= n {
                *s = 0;
            }
        }
    }

    /// An unavailable server, while another is available, is shown to
    /// policies as full (see the module doc), so none picks it.
    fn mask_unavailable(&self, obs: &mut SlotObservation) {
        let available = self.availability.mask();
        let all_up = available.len() != obs.servers.len() || available.iter().all(|&a| a);
        if all_up || !available.iter().any(|&a| a) {
            return;
        }
        for (o, _) in obs.servers.iter_mut().zip(available).filter(|(_, &a)| !a) {
            let full = o.capacity_bytes;
            o.load = SlotLoad {
                eta: 1.0,
                peak_bytes: full,
                high_kv: true,
                occupancy_bytes: full,
                reserved_bytes: full,
                waiting_kv_bytes: full,
                ..o.load
            };
        }
    }

    /// [`SchedulerCore::assign`] that never picks an unavailable server
    /// while another is available (see the module doc); returns how many
    /// requests were moved off unavailable servers.
    fn assign_available(&mut self, obs: &SlotObservation) -> usize {
        self.assign(obs);
        self.move_off_unavailable()
    }

    /// Moves requests of `self.assignment` off unavailable servers (while
    /// any is available) to the least used available one; returns how many.
    fn move_off_unavailable(&mut self) -> usize {
        let available = self.availability.mask();
        let n = self.sites.len();
        if available.len() != n || available.iter().all(|&a| a) || !available.iter().any(|&a| a) {
            return 0;
        }
        let mut count = vec![0usize; n];
        for &s in &self.assignment {
            if available[s] {
                count[s] += 1;
            }
        }
        let mut moved = 0;
        for s in &mut self.assignment {
            if !available[*s] {
                let to = (0..n)
                    .filter(|&i| available[i])
                    .min_by_key(|&i| (count[i], i))
                    .unwrap_or(*s);
                count[to] += 1;
                *s = to;
                moved += 1;
            }
        }
        moved
    }
}

/// Fills `obs`'s solo rates (each of `requests` to every one of `sites`)
/// unless they are there: R×S Shannon rates, most of a large slot's
/// decision when a policy reads them, and wasted when it does not
/// (Least-Loaded, Random). An observation holds all of them or none.
fn fill_rates(obs: &mut SlotObservation, requests: &[SlotRequest], sites: &[ServerSite]) {
    if obs
        .requests
        .first()
        .is_none_or(|r| r.solo_rate_bps.len() == sites.len())
    {
        return;
    }
    let rates_of = |(o, q): (&mut RequestObs, &SlotRequest)| {
        o.solo_rate_bps.clear();
        o.solo_rate_bps.extend(sites.iter().map(|s| {
            let d2 = q.position.distance_squared(&s.position);
            radio::uplink_rate_bps(s.obs.bandwidth_hz, 1, q.power_w, d2)
        }));
    };
    // The rates are independent, so a large slot computes them on every
    // core (each request's own row: the same as computed on one).
    if requests.len() * sites.len() >= PARALLEL_RATES {
        obs.requests
            .par_iter_mut()
            .zip(requests.par_iter())
            .with_min_len(64)
            .for_each(rates_of);
    } else {
        obs.requests.iter_mut().zip(requests).for_each(rates_of);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends every request to server 0, whatever it sees.
    struct AllToFirst;
    impl SchedulingPolicy for AllToFirst {
        fn name(&self) -> &str {
            "all-to-first"
        }
        fn assign(&mut self, _obs: &SlotObservation, out: &mut Vec<usize>) {
            out.clear();
            out.resize(_obs.requests.len(), 0);
        }
    }

    const S: u64 = 1_000_000_000;

    fn site(x: f64) -> ServerSite {
        ServerSite {
            position: Position { x, y: 0.0 },
            obs: ServerObs {
                capacity_bytes: 1000,
                kv_bytes_per_token: 1,
                prefill_tok_s: 1000.0,
                decode_step_empty_s: 0.01,
                decode_step_full_s: 0.02,
                bandwidth_hz: 1e6,
                load: SlotLoad::default(),
            },
        }
    }

    fn core(servers: usize, policy: Box<dyn SchedulingPolicy>) -> SchedulerCore {
        let settings = SchedulerSettings {
            slot_ns: S,
            epsilon: 0.01,
            nu: 0.5,
            report_timeout_ns: 2 * S,
        };
        SchedulerCore::new(
            (0..servers).map(|i| site(50.0 * i as f64)).collect(),
            settings,
            policy,
        )
    }

    fn requests(n: usize) -> Vec<SlotRequest> {
        (0..n)
            .map(|i| SlotRequest {
                id: i as u64,
                user: i,
                input_len: 10,
                output_len: 10,
                position: Position { x: 20.0, y: 30.0 },
                power_w: 0.1,
            })
            .collect()
    }

    fn servers_of(d: &SlotDecision) -> Vec<usize> {
        d.placements.iter().map(|p| p.server).collect()
    }

    /// Every server reports at 0; all but `down` report again at 3 s, so
    /// at 3 s `down` is past its 2 s timeout.
    fn take_down(c: &mut SchedulerCore, down: &[usize]) {
        let n = c.sites().len();
        for s in 0..n {
            c.report(s, 0, SlotLoad::default(), None, 0)
                .expect("report");
        }
        for s in (0..n).filter(|s| !down.contains(s)) {
            c.report(s, 2, SlotLoad::default(), None, 3 * S)
                .expect("report");
        }
        let changes = c.update_availability(3 * S);
        assert_eq!(changes.len(), down.len());
    }

    #[test]
    fn requests_never_go_to_an_unavailable_server_while_another_is_up() {
        let mut c = core(3, Box::new(AllToFirst));
        let d = c.decide(0, &requests(5));
        assert_eq!((servers_of(&d), d.moved), (vec![0; 5], 0));
        // Server 0 down: its five requests spread over 1 and 2, fewest first.
        take_down(&mut c, &[0]);
        let d = c.decide(1, &requests(5));
        assert_eq!((servers_of(&d), d.moved), (vec![1, 2, 1, 2, 1], 5));
        assert_eq!(d.per_server, vec![0, 3, 2]);
        // Everything down: the policy's choice stands.
        let mut c = core(3, Box::new(AllToFirst));
        take_down(&mut c, &[0, 1, 2]);
        let d = c.decide(1, &requests(5));
        assert_eq!((servers_of(&d), d.moved), (vec![0; 5], 0));
    }

    #[test]
    fn a_server_still_loading_after_the_timeout_gets_nothing_until_it_reports() {
        let mut c = core(2, Box::new(AllToFirst));
        c.start(0);
        // Server 1 reports every slot; server 0 (a real model loading and
        // measuring itself) has not reported 3 s after the start.
        c.report(1, 0, SlotLoad::default(), None, S)
            .expect("report");
        c.report(1, 1, SlotLoad::default(), None, 2 * S)
            .expect("report");
        assert!(
            c.update_availability(2 * S).is_empty(),
            "within the timeout"
        );
        let changes = c.update_availability(3 * S);
        assert_eq!(changes.len(), 1);
        assert!(!changes[0].available && changes[0].server == 0);
        let d = c.decide(3, &requests(2));
        assert_eq!(servers_of(&d), vec![1, 1]);
        // Its first report brings it in at the next decision.
        c.report(0, 3, SlotLoad::default(), None, 4 * S)
            .expect("report");
        c.update_availability(4 * S);
        assert_eq!(servers_of(&c.decide(4, &requests(1))), vec![0]);
    }

    #[test]
    fn least_loaded_sees_an_unavailable_server_as_full() {
        let policy = edgemu_policies::lyreo::PolicySpec::parse("least-loaded")
            .expect("least-loaded")
            .build(1);
        let mut c = core(2, policy);
        take_down(&mut c, &[1]);
        let d = c.decide(1, &requests(4));
        assert_eq!(servers_of(&d), vec![0; 4]);
        assert_eq!(
            d.moved, 0,
            "the policy itself avoided the full-looking server"
        );
    }

    #[test]
    fn placements_share_the_cell_of_their_server() {
        let mut c = core(2, Box::new(AllToFirst));
        let reqs = requests(3);
        let d = c.decide(0, &reqs);
        let d2 = reqs[0].position.distance_squared(&c.sites()[0].position);
        let rate = radio::uplink_rate_bps(1e6, 3, 0.1, d2);
        for p in &d.placements {
            assert_eq!(p.rate_bps, rate);
            assert_eq!(p.upload_ns, radio::upload_ns(10, rate));
        }
        let alone = radio::uplink_rate_bps(1e6, 1, 0.1, d2);
        assert!(rate < alone, "three requests share the band");
    }

    #[test]
    fn reports_update_loads_and_capabilities_and_bad_ones_are_refused() {
        let mut c = core(2, Box::new(AllToFirst));
        let load = SlotLoad {
            eta: 0.25,
            backlog: 3,
            backlog_s: 1.5,
            ..SlotLoad::default()
        };
        let measured = ServerCapability {
            capacity_bytes: 500,
            kv_bytes_per_token: 2,
            prefill_tok_s: 300.0,
            decode_step_empty_s: 0.05,
            decode_step_full_s: 0.08,
        };
        c.report(1, 4, load, Some(&measured), S).expect("report");
        c.decide(5, &requests(1));
        assert_eq!(c.sites()[1].obs.load, load);
        assert_eq!(c.sites()[1].obs.capability(), measured);
        let bad = SlotLoad {
            eta: f64::NAN,
            ..load
        };
        assert_eq!(
            c.report(1, 5, bad, None, S),
            Err(ReportRefused::BadWorkload)
        );
        let negative = SlotLoad { eta: -0.1, ..load };
        assert_eq!(
            c.report(1, 5, negative, None, S),
            Err(ReportRefused::BadWorkload)
        );
        // Overload: an iteration past the slot's end puts η above 1.
        let over = SlotLoad { eta: 2.5, ..load };
        assert_eq!(c.report(0, 5, over, None, S), Ok(()));
        assert_eq!(c.report(1, 3, load, None, S), Err(ReportRefused::Stale));
        assert_eq!(
            c.report(2, 5, load, None, S),
            Err(ReportRefused::UnknownServer(2))
        );
        let broken = ServerCapability {
            prefill_tok_s: 0.0,
            ..measured
        };
        assert_eq!(
            c.report(1, 5, load, Some(&broken), S),
            Err(ReportRefused::BadCapability)
        );
        assert_eq!(c.sites()[1].obs.capability(), measured, "kept");
    }

    #[test]
    fn unavailable_servers_are_out_of_the_balance_and_hold_their_queue() {
        let mut q = LyapunovQueues::new(3, 0.01);
        q.update(&[0.5, 0.1, 0.3]);
        let z2 = q.z()[2];
        // Server 2 down: mean over (0.4, 0.2) = 0.3, Y = 0.01 each.
        let y = q.update_available(&[0.4, 0.2, 0.0], &[true, true, false]);
        assert!((y[0] - 0.01).abs() < 1e-12 && (y[1] - 0.01).abs() < 1e-12);
        assert_eq!(y[2], 0.0);
        assert_eq!(q.z()[2], z2, "held");
        // All up (or a mask of the wrong length): the plain update.
        let mut a = q.clone();
        let mut b = q.clone();
        a.update_available(&[0.1, 0.2, 0.3], &[true; 3]);
        b.update(&[0.1, 0.2, 0.3]);
        assert_eq!(a, b);
        let mut c = core(2, Box::new(AllToFirst));
        let busy = SlotLoad {
            eta: 1.0,
            ..SlotLoad::default()
        };
        c.report(0, 0, busy, None, S).expect("report");
        c.end_slot();
        assert!(c.queues().z()[0] > 0.0);
        c.restart(2 * S);
        assert_eq!(c.queues().z(), &[0.0, 0.0]);
        assert_eq!(c.sites()[0].obs.load, SlotLoad::default());
    }

    #[test]
    fn lyapunov_queues_hand_computed() {
        let mut q = LyapunovQueues::new(2, 0.01);
        // Slot 0: η = (0.5, 0.1), mean 0.3, Y = (0.04, 0.04) → Z = (0.03, 0.03)
        let y = q.update(&[0.5, 0.1]);
        assert!((y[0] - 0.04).abs() < 1e-15 && (y[1] - 0.04).abs() < 1e-15);
        assert!((q.z()[0] - 0.03).abs() < 1e-15);
        // Slot 1: η = (0.3, 0.3), Y = 0 → Z = 0.02
        q.update(&[0.3, 0.3]);
        assert!((q.z()[0] - 0.02).abs() < 1e-15);
        // Slot 2: η = (0.0, 0.4), Y = 0.04 → Z = 0.05
        q.update(&[0.0, 0.4]);
        assert!((q.z()[1] - 0.05).abs() < 1e-15);
        // Three idle slots: 0.04, 0.03, 0.02 ; then never below zero.
        for _ in 0..3 {
            q.update(&[0.2, 0.2]);
        }
        assert!((q.z()[0] - 0.02).abs() < 1e-15);
        for _ in 0..5 {
            q.update(&[0.2, 0.2]);
        }
        assert_eq!(q.z(), &[0.0, 0.0]);
    }

    /// Records how many solo rates each request showed it.
    struct SeesRates(std::rc::Rc<std::cell::Cell<Option<usize>>>);
    impl SchedulingPolicy for SeesRates {
        fn name(&self) -> &str {
            "sees-rates"
        }
        fn assign(&mut self, obs: &SlotObservation, out: &mut Vec<usize>) {
            self.0
                .set(obs.requests.first().map(|r| r.solo_rate_bps.len()));
            out.clear();
            out.resize(obs.requests.len(), 0);
        }
    }

    #[test]
    fn solo_rates_are_computed_for_a_policy_or_a_shell_that_reads_them_only() {
        let seen = std::rc::Rc::new(std::cell::Cell::new(None));
        let mut c = core(3, Box::new(SeesRates(seen.clone())));
        c.decide(0, &requests(4));
        assert_eq!(seen.get(), Some(3), "a policy reads rates by default");

        let mut c = core(3, Box::new(edgemu_policies::lyreo::LeastLoaded::new()));
        c.decide(0, &requests(4));
        let held = c.observed.as_ref().expect("observed");
        assert!(held.requests.iter().all(|r| r.solo_rate_bps.is_empty()));
        // Shown outside, the same observation has every rate.
        let sites = c.sites().to_vec();
        let obs = c.observation().expect("observed");
        let q = &requests(1)[0];
        assert_eq!(obs.requests[0].solo_rate_bps.len(), 3);
        for (r, s) in obs.requests[0].solo_rate_bps.iter().zip(&sites) {
            let d2 = q.position.distance_squared(&s.position);
            assert_eq!(
                *r,
                radio::uplink_rate_bps(s.obs.bandwidth_hz, 1, q.power_w, d2)
            );
        }
        let obs = c.observe_with_rates(1, &requests(2));
        assert!(obs.requests.iter().all(|r| r.solo_rate_bps.len() == 3));
    }
}
