//! The `LyreoScheduling` environment's native side: [`SlotStepper`] (one
//! LYREO slot per step: every request of the slot assigned at once) behind
//! a Python class, one environment ([`LyreoCore`]) or `n` stepped by one
//! call ([`LyreoVecCore`]).
//!
//! **Observation** ([`LyreoArrays`], the view an external policy gets in a
//! live run): `pairs` `(U, S, 12)` normalized features of each (request,
//! server) pair, `lengths` `(U, 2)` input and output tokens, `servers`
//! `(S, 8)` normalized server state, `queues` `(S,)` the Lyapunov queues
//! `Z_s`. Every user sends one request per slot, so `U` requests.
//! **Reward**: [`SlotStep::reward`], eq. 30 of the LYREO paper divided by U.
//!
//! **Episodes.** `reset(seed)` lays out the scenario with that seed (users,
//! servers, radio draws, workload and mobility streams: the experiments'
//! `Scenario::seed`) and seeds the stream `reset_next()` draws the following
//! episodes' seeds from, as in the repair environment.
//!
//! **Options**: `users`, `servers`, `mix` (`hom`/`mod`/`het`), `workload`
//! (`lmsys-like`, `sharegpt`), `mobility` (`random-walk`,
//! `random-waypoint`), `slots` (T), `epsilon`, `nu`, `bandwidth_mhz` and
//! `power_dbm` (ranges drawn per server and per user), `kv_budget_share`,
//! `batching` (`continuous`, `static`).

use std::time::Instant;

use edgemu_policies::external::{LyreoArrays, SERVER_FEATURES};
use edgemu_policies::lyreo::{PolicySpec, ServerBatching, PAIR_FEATURES};
use edgemu_serving::mobility::Mobility;
use edgemu_serving::workload::Workload;
use edgemu_serving::{GpuMix, Scenario, SlotStep, SlotStepper};
use numpy::ndarray::{Array1, Array2, Array3, Array4};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArray3, PyArray4, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::errors::value_err;
use crate::options::range;

/// The fallback of the stepper: it never decides in the environment (every
/// slot's assignment comes from Python) but a [`SlotStepper`] needs one.
const FALLBACK: &str = "least-loaded";

#[derive(Clone)]
struct LyreoOptions {
    scenario: Scenario,
    batching: ServerBatching,
}

#[allow(clippy::too_many_arguments)]
fn options(
    users: usize,
    servers: usize,
    mix: &str,
    workload: &str,
    mobility: &str,
    slots: u64,
    epsilon: f64,
    nu: f64,
    bandwidth_mhz: Option<&Bound<'_, PyAny>>,
    power_dbm: Option<&Bound<'_, PyAny>>,
    kv_budget_share: f64,
    batching: &str,
) -> PyResult<LyreoOptions> {
    let mut sc = Scenario::paper_default(0);
    if users == 0 || servers == 0 || slots == 0 {
        return Err(PyValueError::new_err(format!(
            "users ({users}), servers ({servers}) and slots ({slots}) must be at least 1"
        )));
    }
    sc.users = users;
    sc.servers = servers;
    sc.slots = slots;
    sc.mix = GpuMix::parse(mix).map_err(value_err)?;
    sc.workload = Workload::parse(workload).map_err(value_err)?;
    sc.mobility = Mobility::parse(mobility).map_err(value_err)?;
    if !(epsilon.is_finite() && epsilon >= 0.0 && nu.is_finite() && nu >= 0.0) {
        return Err(PyValueError::new_err(format!(
            "epsilon ({epsilon}) and nu ({nu}) must be finite and >= 0"
        )));
    }
    sc.epsilon = epsilon;
    sc.nu = nu;
    if let Some(v) = bandwidth_mhz {
        let (lo, hi) = range("bandwidth_mhz", v)?;
        if lo <= 0.0 {
            return Err(PyValueError::new_err("bandwidth_mhz must be positive"));
        }
        sc.bandwidth_hz = (lo * 1e6, hi * 1e6);
    }
    if let Some(v) = power_dbm {
        sc.power_dbm = range("power_dbm", v)?;
    }
    sc.kv_budget_share = kv_budget_share;
    let batching = match batching {
        "continuous" => ServerBatching::Continuous,
        "static" => ServerBatching::Static,
        _ => {
            return Err(PyValueError::new_err(format!(
                "batching `{batching}`: `continuous` or `static` expected"
            )))
        }
    };
    let opts = LyreoOptions {
        scenario: sc,
        batching,
    };
    // The scenario's own checks, now rather than at the first reset.
    LyreoEnv::stepper(&opts, 0)?;
    Ok(opts)
}

/// One environment: the stepper of the running episode and the seed stream.
struct LyreoEnv {
    opts: LyreoOptions,
    stepper: Option<SlotStepper>,
    seeds: ChaCha8Rng,
    arrays: LyreoArrays,
    assignment: Vec<usize>,
}

impl LyreoEnv {
    fn new(opts: LyreoOptions) -> Self {
        LyreoEnv {
            opts,
            stepper: None,
            seeds: ChaCha8Rng::seed_from_u64(0),
            arrays: LyreoArrays::default(),
            assignment: Vec::new(),
        }
    }

    fn stepper(opts: &LyreoOptions, seed: u64) -> PyResult<SlotStepper> {
        let mut sc = opts.scenario.clone();
        sc.seed = seed;
        let fallback = PolicySpec::parse(FALLBACK).map_err(value_err)?;
        SlotStepper::new(&sc, opts.batching, fallback.build(seed ^ 0x5eed), "python")
            .map_err(value_err)
    }

    fn reset(&mut self, seed: u64) -> PyResult<()> {
        self.seeds = ChaCha8Rng::seed_from_u64(seed);
        self.start(seed)
    }

    fn reset_next(&mut self) -> PyResult<()> {
        let seed = self.seeds.random();
        self.start(seed)
    }

    fn start(&mut self, seed: u64) -> PyResult<()> {
        let mut st = Self::stepper(&self.opts, seed)?;
        self.arrays.fill_from(st.observation());
        self.stepper = Some(st);
        Ok(())
    }

    /// Checks `action` (one server index per request) into `self.assignment`.
    fn check_action(&mut self, action: &[i64]) -> PyResult<()> {
        let (users, servers) = (self.opts.scenario.users, self.opts.scenario.servers);
        if action.len() != users {
            return Err(PyValueError::new_err(format!(
                "the action must assign each of the {users} requests, got {} entries",
                action.len()
            )));
        }
        self.assignment.clear();
        for (i, &s) in action.iter().enumerate() {
            match usize::try_from(s) {
                Ok(s) if s < servers => self.assignment.push(s),
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "action[{i}] = {s}: a server index in 0..{servers} expected"
                    )))
                }
            }
        }
        Ok(())
    }

    fn running(&mut self) -> PyResult<&mut SlotStepper> {
        match self.stepper.as_mut() {
            Some(st) if !st.is_done() => Ok(st),
            _ => Err(PyValueError::new_err(
                "the episode is over (or was never reset): call reset() first",
            )),
        }
    }

    /// Steps with the checked assignment (`None`: the fallback's) and
    /// refreshes the arrays.
    fn step(&mut self, own: bool) -> PyResult<SlotStep> {
        self.running()?;
        let Some(st) = self.stepper.as_mut() else {
            return Err(PyValueError::new_err("call reset() first"));
        };
        let r = st
            .step(own.then_some(self.assignment.as_slice()))
            .map_err(value_err)?;
        self.arrays.fill_from(st.observation());
        Ok(r)
    }
}

fn info<'py>(py: Python<'py>, s: &SlotStep, slot: u64) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("slot", slot)?;
    d.set_item("completed", s.completed)?;
    d.set_item("latency_sum_s", s.latency_sum_s)?;
    d.set_item("rejected", s.rejected)?;
    d.set_item("drift", s.drift)?;
    d.set_item("lb_dev", s.lb_dev)?;
    d.set_item("high_kv", s.high_kv)?;
    d.set_item("moved", s.moved)?;
    Ok(d)
}

type ObsTuple<'py> = (
    Bound<'py, PyArray3<f32>>,
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray1<f32>>,
);

/// The arrays as numpy arrays `(pairs, lengths, servers, queues)`.
pub fn obs_tuple<'py>(py: Python<'py>, a: &LyreoArrays) -> PyResult<ObsTuple<'py>> {
    let (r, s) = (a.requests, a.servers);
    let pairs =
        Array3::from_shape_vec((r, s, PAIR_FEATURES), a.pairs.clone()).map_err(value_err)?;
    let lengths = Array2::from_shape_vec((r, 2), a.lengths.clone()).map_err(value_err)?;
    let servers = Array2::from_shape_vec((s, SERVER_FEATURES), a.server_features.clone())
        .map_err(value_err)?;
    Ok((
        pairs.into_pyarray(py),
        lengths.into_pyarray(py),
        servers.into_pyarray(py),
        Array1::from_vec(a.queues.clone()).into_pyarray(py),
    ))
}

/// One `LyreoScheduling` environment (module doc). Not `Send` (a
/// scheduling policy is not): use it from the thread that made it.
#[pyclass(module = "edgemu._core", unsendable)]
pub struct LyreoCore {
    env: LyreoEnv,
}

#[pymethods]
impl LyreoCore {
    #[new]
    #[pyo3(signature = (*, users=40, servers=8, mix="mod", workload="lmsys-like", mobility="random-walk",
        slots=800, epsilon=0.01, nu=0.5, bandwidth_mhz=None, power_dbm=None, kv_budget_share=1.0,
        batching="continuous"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        users: usize,
        servers: usize,
        mix: &str,
        workload: &str,
        mobility: &str,
        slots: u64,
        epsilon: f64,
        nu: f64,
        bandwidth_mhz: Option<&Bound<'_, PyAny>>,
        power_dbm: Option<&Bound<'_, PyAny>>,
        kv_budget_share: f64,
        batching: &str,
    ) -> PyResult<Self> {
        let opts = options(
            users,
            servers,
            mix,
            workload,
            mobility,
            slots,
            epsilon,
            nu,
            bandwidth_mhz,
            power_dbm,
            kv_budget_share,
            batching,
        )?;
        Ok(LyreoCore {
            env: LyreoEnv::new(opts),
        })
    }

    /// `(users, servers, slots)` of the scenario.
    #[getter]
    fn shape(&self) -> (usize, usize, u64) {
        let sc = &self.env.opts.scenario;
        (sc.users, sc.servers, sc.slots)
    }

    /// The server classes in order (e.g. `["A100-40GB", ...]`).
    #[getter]
    fn classes(&self) -> Vec<&'static str> {
        let sc = &self.env.opts.scenario;
        sc.mix.classes(sc.servers)
    }

    /// Starts the episode of `seed`; returns slot 0's observation.
    fn reset<'py>(&mut self, py: Python<'py>, seed: u64) -> PyResult<ObsTuple<'py>> {
        self.env.reset(seed)?;
        obs_tuple(py, &self.env.arrays)
    }

    /// Starts the next episode of the seed stream of the last `reset`.
    fn reset_next<'py>(&mut self, py: Python<'py>) -> PyResult<ObsTuple<'py>> {
        self.env.reset_next()?;
        obs_tuple(py, &self.env.arrays)
    }

    /// Assigns the slot's requests (`action[i]`: request `i`'s server) and
    /// runs the slot: `(obs, reward, done, info)`, `obs` the next slot's
    /// (the last one's once done).
    #[allow(clippy::type_complexity)]
    fn step<'py>(
        &mut self,
        py: Python<'py>,
        action: numpy::PyReadonlyArray1<'py, i64>,
    ) -> PyResult<(ObsTuple<'py>, f64, bool, Bound<'py, PyDict>)> {
        self.env.running()?;
        self.env
            .check_action(action.as_slice().map_err(value_err)?)?;
        let slot = self.env.stepper.as_ref().map_or(0, SlotStepper::slot);
        let s = self.env.step(true)?;
        Ok((
            obs_tuple(py, &self.env.arrays)?,
            s.reward,
            s.done,
            info(py, &s, slot)?,
        ))
    }

    /// The native loop the benchmark compares Python with: `slots` slots
    /// from the episode of `seed` on, each assigned round-robin (request `i`
    /// to server `i mod S`, what the Python loop sends), the arrays a Python
    /// step hands over built every slot. Returns `(slots, seconds, episodes)`.
    fn run_native(&self, slots: usize, seed: u64) -> PyResult<(usize, f64, usize)> {
        let mut env = LyreoEnv::new(self.env.opts.clone());
        let (users, servers) = (env.opts.scenario.users, env.opts.scenario.servers);
        let action: Vec<i64> = (0..users).map(|i| (i % servers) as i64).collect();
        let t0 = Instant::now();
        env.reset(seed)?;
        let mut episodes = 1;
        let mut sink = 0.0f32;
        for _ in 0..slots {
            env.check_action(&action)?;
            let s = env.step(true)?;
            sink += env.arrays.pairs.first().copied().unwrap_or(0.0);
            if s.done {
                env.reset_next()?;
                episodes += 1;
            }
        }
        std::hint::black_box(sink);
        Ok((slots, t0.elapsed().as_secs_f64(), episodes))
    }
}

/// `n` `LyreoScheduling` environments stepped by one call, auto-resetting.
#[pyclass(module = "edgemu._core", unsendable)]
pub struct LyreoVecCore {
    envs: Vec<LyreoEnv>,
}

type VecObs<'py> = (
    Bound<'py, PyArray4<f32>>,
    Bound<'py, PyArray3<f32>>,
    Bound<'py, PyArray3<f32>>,
    Bound<'py, PyArray2<f32>>,
);

/// The environments' arrays stacked: `(n, U, S, 12)`, `(n, U, 2)`,
/// `(n, S, 8)`, `(n, S)`.
fn stack<'py, 'a>(
    py: Python<'py>,
    arrays: impl ExactSizeIterator<Item = &'a LyreoArrays>,
    users: usize,
    servers: usize,
) -> PyResult<VecObs<'py>> {
    let n = arrays.len();
    let (mut p, mut l, mut s, mut q) = (
        Vec::with_capacity(n * users * servers * PAIR_FEATURES),
        Vec::with_capacity(n * users * 2),
        Vec::with_capacity(n * servers * SERVER_FEATURES),
        Vec::with_capacity(n * servers),
    );
    for a in arrays {
        p.extend_from_slice(&a.pairs);
        l.extend_from_slice(&a.lengths);
        s.extend_from_slice(&a.server_features);
        q.extend_from_slice(&a.queues);
    }
    Ok((
        Array4::from_shape_vec((n, users, servers, PAIR_FEATURES), p)
            .map_err(value_err)?
            .into_pyarray(py),
        Array3::from_shape_vec((n, users, 2), l)
            .map_err(value_err)?
            .into_pyarray(py),
        Array3::from_shape_vec((n, servers, SERVER_FEATURES), s)
            .map_err(value_err)?
            .into_pyarray(py),
        Array2::from_shape_vec((n, servers), q)
            .map_err(value_err)?
            .into_pyarray(py),
    ))
}

#[pymethods]
impl LyreoVecCore {
    #[new]
    #[pyo3(signature = (n, *, users=40, servers=8, mix="mod", workload="lmsys-like", mobility="random-walk",
        slots=800, epsilon=0.01, nu=0.5, bandwidth_mhz=None, power_dbm=None, kv_budget_share=1.0,
        batching="continuous"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        n: usize,
        users: usize,
        servers: usize,
        mix: &str,
        workload: &str,
        mobility: &str,
        slots: u64,
        epsilon: f64,
        nu: f64,
        bandwidth_mhz: Option<&Bound<'_, PyAny>>,
        power_dbm: Option<&Bound<'_, PyAny>>,
        kv_budget_share: f64,
        batching: &str,
    ) -> PyResult<Self> {
        if n == 0 {
            return Err(PyValueError::new_err("n: at least one environment"));
        }
        let opts = options(
            users,
            servers,
            mix,
            workload,
            mobility,
            slots,
            epsilon,
            nu,
            bandwidth_mhz,
            power_dbm,
            kv_budget_share,
            batching,
        )?;
        Ok(LyreoVecCore {
            envs: (0..n).map(|_| LyreoEnv::new(opts.clone())).collect(),
        })
    }

    fn __len__(&self) -> usize {
        self.envs.len()
    }

    fn dims(&self) -> (usize, usize) {
        let sc = &self.envs[0].opts.scenario;
        (sc.users, sc.servers)
    }

    /// Starts environment `i`'s episode of `seeds[i]`; the stacked observation.
    fn reset<'py>(&mut self, py: Python<'py>, seeds: Vec<u64>) -> PyResult<VecObs<'py>> {
        if seeds.len() != self.envs.len() {
            return Err(PyValueError::new_err(format!(
                "{} seeds for {} environments",
                seeds.len(),
                self.envs.len()
            )));
        }
        for (env, seed) in self.envs.iter_mut().zip(seeds) {
            env.reset(seed)?;
        }
        let (u, s) = self.dims();
        stack(py, self.envs.iter().map(|e| &e.arrays), u, s)
    }

    /// Steps every environment with its row of `actions` `(n, U)`; an
    /// environment whose episode ends starts its next one. Returns `(obs,
    /// rewards, dones, final_obs, infos)`: `final_obs` stacks the ended
    /// episodes' last observations (their rows; the others' current ones),
    /// `infos` is one dict per environment.
    #[allow(clippy::type_complexity)]
    fn step<'py>(
        &mut self,
        py: Python<'py>,
        actions: PyReadonlyArray2<'py, i64>,
    ) -> PyResult<(
        VecObs<'py>,
        Bound<'py, PyArray1<f64>>,
        Bound<'py, PyArray1<bool>>,
        VecObs<'py>,
        Vec<Bound<'py, PyDict>>,
    )> {
        let a = actions.as_array();
        if a.nrows() != self.envs.len() {
            return Err(PyValueError::new_err(format!(
                "{} rows of actions for {} environments",
                a.nrows(),
                self.envs.len()
            )));
        }
        // Every action is checked before any environment steps, so an error
        // leaves them all where they were.
        for (env, row) in self.envs.iter_mut().zip(a.rows()) {
            env.running()?;
            env.check_action(&row.to_vec())?;
        }
        let (u, s) = self.dims();
        let mut rewards = Vec::with_capacity(self.envs.len());
        let mut dones = Vec::with_capacity(self.envs.len());
        let mut infos = Vec::with_capacity(self.envs.len());
        let mut ended: Vec<Option<LyreoArrays>> = Vec::with_capacity(self.envs.len());
        for env in &mut self.envs {
            let slot = env.stepper.as_ref().map_or(0, SlotStepper::slot);
            let r = env.step(true)?;
            ended.push(r.done.then(|| env.arrays.clone()));
            if r.done {
                env.reset_next()?;
            }
            rewards.push(r.reward);
            dones.push(r.done);
            infos.push(info(py, &r, slot)?);
        }
        let obs = stack(py, self.envs.iter().map(|e| &e.arrays), u, s)?;
        let finals = stack(
            py,
            self.envs
                .iter()
                .zip(&ended)
                .map(|(e, f)| f.as_ref().unwrap_or(&e.arrays)),
            u,
            s,
        )?;
        Ok((
            obs,
            rewards.into_pyarray(py),
            dones.into_pyarray(py),
            finals,
            infos,
        ))
    }
}
