//! The `KvRepair` environment's native side: [`RepairStepper`] (one repair
//! decision of a PriorityFEC handoff per step) behind a Python class, one
//! environment ([`RepairCore`]) or `n` stepped by one call ([`RepairVecCore`]).
//!
//! **Episodes.** `reset(seed)` draws the episode of `seed` from the
//! options' [`EpisodeRanges`] (the stepper's, so the same episode
//! `RepairStepper::evaluate` runs for that seed) and seeds a ChaCha8 stream
//! from which `reset_next()` draws the seeds of the following episodes: a
//! Python env reset once with a seed and then without one, and a vector env
//! auto-resetting, play the same sequence of episodes.
//!
//! **Options** (keyword arguments, see docs/python.md): `channel` `"paper"`
//! (the paper's main channel, [`EpisodeRanges::paper_setting`], default) or
//! `"training"` (the DDQN trainer's randomized ranges); `profile` the
//! per-block utilities (`"built-in:smollm2-135m-kvu"` by default, a
//! profile file, or `"synthetic"`); `layers`, `rho`, `rtt_ms` (a number or a
//! `(low, high)` range), `rate_mbps` (a number or a list drawn from),
//! `loss` (`"gilbert-elliott"` with `ge = (εG, εB, pGB, pBG)`, each a number
//! or a range, or `"bernoulli"` with `loss_rate`), `potential`
//! `(λp, λd, λw)` of the shaped reward.

use std::sync::Mutex;
use std::time::Instant;

use edgemu_handoff::train::env::EpisodeRanges;
use edgemu_handoff::{PotentialWeights, RepairEnvOptions, RepairStep, RepairStepper};
use edgemu_policies::external::RepairArrays;
use edgemu_policies::repair::ddqn::DdqnScheduler;
use edgemu_policies::repair::{
    ActionMask, RepairAction, RepairObservation, RepairScheduler, N_ACTIONS, N_FEATURES,
};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::errors::value_err;
use crate::options::{int_range, range, values};
use crate::profile::profile_utilities;
use crate::weights::load_ddqn;

/// The paper's evaluation handoff has 30 layers (SmolLM2-135M).
const PAPER_LAYERS: u32 = 30;

/// Builds the stepper options from the keyword arguments (module doc).
#[allow(clippy::too_many_arguments)]
fn options(
    channel: &str,
    profile: &str,
    layers: Option<&Bound<'_, PyAny>>,
    rho: Option<&Bound<'_, PyAny>>,
    rtt_ms: Option<&Bound<'_, PyAny>>,
    rate_mbps: Option<&Bound<'_, PyAny>>,
    loss: &str,
    ge: Option<&Bound<'_, PyAny>>,
    loss_rate: Option<f64>,
    potential: Option<(f64, f64, f64)>,
) -> PyResult<RepairEnvOptions> {
    let layer_range = layers.map(|v| int_range("layers", v)).transpose()?;
    let mut ranges = match channel {
        "paper" => EpisodeRanges::paper_setting(layer_range.map_or(PAPER_LAYERS, |r| r.1)),
        "training" => EpisodeRanges::default(),
        _ => {
            return Err(PyValueError::new_err(format!(
                "channel `{channel}`: `paper` or `training` expected"
            )))
        }
    };
    if let Some(l) = layer_range {
        ranges.layers = l;
    }
    if let Some((utilities, token_blocks)) = profile_utilities(profile)? {
        let profile_layers = utilities.len() as u32 / token_blocks;
        if ranges.layers.1 > profile_layers {
            return Err(PyValueError::new_err(format!(
                "layers: at most {profile_layers} with a profile of {profile_layers} layers, got {:?}",
                ranges.layers
            )));
        }
        ranges.token_blocks = token_blocks;
        ranges.profile = Some(utilities);
    }
    if let Some(v) = rho {
        ranges.rho = range("rho", v)?;
    }
    if let Some(v) = rtt_ms {
        ranges.rtt_ms = range("rtt_ms", v)?;
    }
    if let Some(v) = rate_mbps {
        ranges.rates_bps = values("rate_mbps", v)?
            .into_iter()
            .map(|m| (m * 1e6).round() as u64)
            .collect();
    }
    let prob = |name: &str, v: (f64, f64)| {
        if v.0 >= 0.0 && v.1 <= 1.0 {
            Ok(v)
        } else {
            Err(PyValueError::new_err(format!(
                "{name}: {v:?} is not a probability"
            )))
        }
    };
    match loss {
        "gilbert-elliott" | "ge" => {
            if loss_rate.is_some() {
                return Err(PyValueError::new_err(
                    "loss_rate is the bernoulli model's; give ge=(εG, εB, pGB, pBG) instead",
                ));
            }
            if let Some(ge) = ge {
                let parts: Vec<Bound<'_, PyAny>> = ge.extract().map_err(|_| {
                    PyValueError::new_err("ge: four values (εG, εB, pGB, pBG) expected")
                })?;
                let [g, b, gb, bg] = parts.as_slice() else {
                    return Err(PyValueError::new_err(
                        "ge: four values (εG, εB, pGB, pBG) expected",
                    ));
                };
                ranges.eps_g = prob("ge εG", range("ge εG", g)?)?;
                ranges.eps_b = prob("ge εB", range("ge εB", b)?)?;
                ranges.p_gb = prob("ge pGB", range("ge pGB", gb)?)?;
                ranges.p_bg = prob("ge pBG", range("ge pBG", bg)?)?;
            }
        }
        "bernoulli" => {
            if ge.is_some() {
                return Err(PyValueError::new_err(
                    "ge is the gilbert-elliott model's; give loss_rate instead",
                ));
            }
            let p = loss_rate
                .ok_or_else(|| PyValueError::new_err("the bernoulli loss model needs loss_rate"))?;
            // A Gilbert–Elliott channel that loses with p in both states is
            // Bernoulli(p): the link model's one implementation of loss.
            let (p, _) = prob("loss_rate", (p, p))?;
            ranges.eps_g = (p, p);
            ranges.eps_b = (p, p);
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "loss `{loss}`: `gilbert-elliott` or `bernoulli` expected"
            )))
        }
    }
    let potential = match potential {
        None => PotentialWeights::default(),
        Some((progress, deficit, window)) => {
            if ![progress, deficit, window].iter().all(|x| x.is_finite()) {
                return Err(PyValueError::new_err(
                    "potential: three finite numbers expected",
                ));
            }
            PotentialWeights {
                progress,
                deficit,
                window,
            }
        }
    };
    Ok(RepairEnvOptions { ranges, potential })
}

/// One environment: the stepper and the seed stream of its next episodes.
struct RepairEnv {
    stepper: RepairStepper,
    seeds: ChaCha8Rng,
    /// Whether an episode is running (reset and not done).
    running: bool,
}

impl RepairEnv {
    fn new(opts: RepairEnvOptions) -> PyResult<Self> {
        Ok(RepairEnv {
            stepper: RepairStepper::new(opts).map_err(value_err)?,
            seeds: ChaCha8Rng::seed_from_u64(0),
            running: false,
        })
    }

    fn reset(&mut self, seed: u64) -> PyResult<RepairStep> {
        self.seeds = ChaCha8Rng::seed_from_u64(seed);
        self.start(seed)
    }

    fn reset_next(&mut self) -> PyResult<RepairStep> {
        let seed = self.seeds.random();
        self.start(seed)
    }

    fn start(&mut self, seed: u64) -> PyResult<RepairStep> {
        let s = self.stepper.reset(seed).map_err(value_err)?;
        // An episode whose deadline passes before any decision (not one the
        // ranges can draw) would leave nothing to step.
        self.running = !s.done;
        Ok(s)
    }

    fn step(&mut self, action: i64) -> PyResult<RepairStep> {
        let a = usize::try_from(action)
            .ok()
            .and_then(RepairAction::from_index)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "action {action}: 0 (source burst), 1, 2 or 3 (repair burst of 1, 4, 16) expected"
                ))
            })?;
        if !self.running {
            return Err(PyValueError::new_err(
                "the episode is over (or was never reset): call reset() first",
            ));
        }
        let s = self.stepper.step(a).map_err(value_err)?;
        self.running = !s.done;
        Ok(s)
    }
}

/// The Python view of a step: observation and mask as numpy arrays.
type StepTuple<'py> = (
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<bool>>,
    f64,
    bool,
    f64,
    bool,
);

fn step_tuple<'py>(py: Python<'py>, s: &RepairStep) -> StepTuple<'py> {
    let a = RepairArrays::new(&s.obs, s.mask);
    (
        PyArray1::from_slice(py, &a.features),
        PyArray1::from_slice(py, &a.mask),
        s.reward,
        s.done,
        s.recovered_utility,
        s.mask_violation,
    )
}

/// One `KvRepair` environment (module doc).
#[pyclass(module = "edgemu._core")]
pub struct RepairCore {
    // A Python object may be used from any thread; the stepper is Send, not
    // Sync. Uncontended, the lock is a few nanoseconds a step.
    env: Mutex<RepairEnv>,
}

/// The environment behind `m` (a panic while it was held is a bug; its
/// state is then refused rather than trusted).
fn lock<T>(m: &Mutex<T>) -> PyResult<std::sync::MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| PyValueError::new_err("the environment failed earlier: make a new one"))
}

/// A policy of the benchmark loops: the first feasible action (what Python's
/// `mask.argmax()` picks), so the native and the Python loop play the same
/// episodes step for step.
struct FirstAllowed;

impl RepairScheduler for FirstAllowed {
    fn name(&self) -> &str {
        "first-allowed"
    }
    fn decide(&mut self, _obs: &RepairObservation, mask: ActionMask) -> RepairAction {
        mask.first_allowed().unwrap_or(RepairAction::Source)
    }
}

#[pymethods]
impl RepairCore {
    #[new]
    #[pyo3(signature = (*, channel="paper", profile="built-in:smollm2-135m-kvu", layers=None, rho=None,
        rtt_ms=None, rate_mbps=None, loss="gilbert-elliott", ge=None, loss_rate=None, potential=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        channel: &str,
        profile: &str,
        layers: Option<&Bound<'_, PyAny>>,
        rho: Option<&Bound<'_, PyAny>>,
        rtt_ms: Option<&Bound<'_, PyAny>>,
        rate_mbps: Option<&Bound<'_, PyAny>>,
        loss: &str,
        ge: Option<&Bound<'_, PyAny>>,
        loss_rate: Option<f64>,
        potential: Option<(f64, f64, f64)>,
    ) -> PyResult<Self> {
        let opts = options(
            channel, profile, layers, rho, rtt_ms, rate_mbps, loss, ge, loss_rate, potential,
        )?;
        Ok(RepairCore {
            env: Mutex::new(RepairEnv::new(opts)?),
        })
    }

    /// Starts the episode of `seed`: `(features, mask, 0.0, done, J, False)`.
    fn reset<'py>(&self, py: Python<'py>, seed: u64) -> PyResult<StepTuple<'py>> {
        let s = lock(&self.env)?.reset(seed)?;
        Ok(step_tuple(py, &s))
    }

    /// Starts the next episode of the seed stream of the last `reset`.
    fn reset_next<'py>(&self, py: Python<'py>) -> PyResult<StepTuple<'py>> {
        let s = lock(&self.env)?.reset_next()?;
        Ok(step_tuple(py, &s))
    }

    /// Answers the pending decision: `(features, mask, reward, done, J,
    /// mask_violation)`.
    fn step<'py>(&self, py: Python<'py>, action: i64) -> PyResult<StepTuple<'py>> {
        let s = lock(&self.env)?.step(action)?;
        Ok(step_tuple(py, &s))
    }

    /// The running episode: `{"rho", "rate_bps", "rtt_ms", "layers",
    /// "source_packets", "loss"}`.
    fn episode<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        let env = lock(&self.env)?;
        if let Some(sc) = env.stepper.scenario() {
            d.set_item("rho", sc.rho)?;
            d.set_item("rate_bps", sc.rate_bps)?;
            d.set_item(
                "rtt_ms",
                (sc.forward.delay_ns + sc.reverse.delay_ns) as f64 / 1e6,
            )?;
            d.set_item("layers", sc.layout.n_layers)?;
            d.set_item("blocks", sc.layout.n_blocks())?;
            d.set_item("loss", format!("{:?}", sc.forward.loss))?;
        }
        Ok(d)
    }

    /// Recovered utility of whole handoffs of the episodes of `seeds`,
    /// scheduled by the repair DDQN of `weights` (a file, or
    /// `built-in:repair-ddqn`; loaded by the loader a live `policy.swap` uses).
    fn evaluate_ddqn(&self, py: Python<'_>, weights: &str, seeds: Vec<u64>) -> PyResult<Vec<f64>> {
        let net = load_ddqn(weights)?;
        let opts = lock(&self.env)?.stepper.options().clone();
        py.detach(move || {
            RepairStepper::evaluate(
                &opts,
                &mut || Box::new(DdqnScheduler::new(net.clone())),
                &seeds,
            )
        })
        .map_err(value_err)
    }

    /// The native loop the benchmark compares Python with: `steps` decisions
    /// from the episode of `seed` on (then the following episodes of its seed
    /// stream), each answered with the first feasible action, the arrays a
    /// Python step hands over built each step. Returns `(steps, seconds,
    /// episodes)`.
    fn run_native(&self, py: Python<'_>, steps: usize, seed: u64) -> PyResult<(usize, f64, usize)> {
        let opts = lock(&self.env)?.stepper.options().clone();
        py.detach(move || {
            let mut env = RepairEnv::new(opts)?;
            let mut policy = FirstAllowed;
            let t0 = Instant::now();
            let mut s = env.reset(seed)?;
            let mut episodes = 1;
            let mut sink = 0.0f32;
            for _ in 0..steps {
                let a = RepairArrays::new(&s.obs, s.mask);
                sink += a.features[0];
                let action = policy.decide(&s.obs, s.mask);
                s = env.step(action.index() as i64)?;
                if s.done {
                    s = env.reset_next()?;
                    episodes += 1;
                }
            }
            std::hint::black_box(sink);
            Ok((steps, t0.elapsed().as_secs_f64(), episodes))
        })
    }
}

/// `n` `KvRepair` environments stepped by one call, auto-resetting.
#[pyclass(module = "edgemu._core")]
pub struct RepairVecCore {
    envs: Mutex<Vec<RepairEnv>>,
}

/// Stacked arrays of one vector step: features `(n, 15)`, masks `(n, 4)`,
/// rewards, dones, recovered utilities, mask violations, and the final
/// features of the episodes that ended (rows of done envs; zeros elsewhere).
type VecStep<'py> = (
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray2<bool>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<bool>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<bool>>,
    Bound<'py, PyArray2<f32>>,
);

#[derive(Default)]
struct VecBuffers {
    features: Vec<f32>,
    masks: Vec<bool>,
    rewards: Vec<f64>,
    dones: Vec<bool>,
    recovered: Vec<f64>,
    violations: Vec<bool>,
    finals: Vec<f32>,
}

impl VecBuffers {
    fn with(n: usize) -> Self {
        VecBuffers {
            features: Vec::with_capacity(n * N_FEATURES),
            masks: Vec::with_capacity(n * N_ACTIONS),
            rewards: Vec::with_capacity(n),
            dones: Vec::with_capacity(n),
            recovered: Vec::with_capacity(n),
            violations: Vec::with_capacity(n),
            finals: vec![0.0; n * N_FEATURES],
        }
    }

    fn push(&mut self, s: &RepairStep) {
        let a = RepairArrays::new(&s.obs, s.mask);
        self.features.extend_from_slice(&a.features);
        self.masks.extend_from_slice(&a.mask);
        self.rewards.push(s.reward);
        self.dones.push(s.done);
        self.recovered.push(s.recovered_utility);
        self.violations.push(s.mask_violation);
    }

    fn into_py(self, py: Python<'_>) -> PyResult<VecStep<'_>> {
        let n = self.rewards.len();
        let rows = |v: Vec<f32>| Array2::from_shape_vec((n, N_FEATURES), v).map_err(value_err);
        let masks = Array2::from_shape_vec((n, N_ACTIONS), self.masks).map_err(value_err)?;
        Ok((
            rows(self.features)?.into_pyarray(py),
            masks.into_pyarray(py),
            self.rewards.into_pyarray(py),
            self.dones.into_pyarray(py),
            self.recovered.into_pyarray(py),
            self.violations.into_pyarray(py),
            rows(self.finals)?.into_pyarray(py),
        ))
    }
}

#[pymethods]
impl RepairVecCore {
    #[new]
    #[pyo3(signature = (n, *, channel="paper", profile="built-in:smollm2-135m-kvu", layers=None, rho=None,
        rtt_ms=None, rate_mbps=None, loss="gilbert-elliott", ge=None, loss_rate=None, potential=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        n: usize,
        channel: &str,
        profile: &str,
        layers: Option<&Bound<'_, PyAny>>,
        rho: Option<&Bound<'_, PyAny>>,
        rtt_ms: Option<&Bound<'_, PyAny>>,
        rate_mbps: Option<&Bound<'_, PyAny>>,
        loss: &str,
        ge: Option<&Bound<'_, PyAny>>,
        loss_rate: Option<f64>,
        potential: Option<(f64, f64, f64)>,
    ) -> PyResult<Self> {
        if n == 0 {
            return Err(PyValueError::new_err("n: at least one environment"));
        }
        let opts = options(
            channel, profile, layers, rho, rtt_ms, rate_mbps, loss, ge, loss_rate, potential,
        )?;
        let envs = (0..n)
            .map(|_| RepairEnv::new(opts.clone()))
            .collect::<PyResult<_>>()?;
        Ok(RepairVecCore {
            envs: Mutex::new(envs),
        })
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(lock(&self.envs)?.len())
    }

    /// Starts environment `i`'s episode of `seeds[i]`.
    fn reset<'py>(&self, py: Python<'py>, seeds: Vec<u64>) -> PyResult<VecStep<'py>> {
        let mut guard = lock(&self.envs)?;
        let envs = &mut *guard;
        if seeds.len() != envs.len() {
            return Err(PyValueError::new_err(format!(
                "{} seeds for {} environments",
                seeds.len(),
                envs.len()
            )));
        }
        let b = py.detach(|| -> PyResult<VecBuffers> {
            let mut b = VecBuffers::with(envs.len());
            for (env, seed) in envs.iter_mut().zip(seeds) {
                b.push(&env.reset(seed)?);
            }
            Ok(b)
        })?;
        b.into_py(py)
    }

    /// Steps every environment with its action; an environment whose
    /// episode ends starts its next one (its row of the final features
    /// holds the ended episode's last observation).
    fn step<'py>(
        &self,
        py: Python<'py>,
        actions: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<VecStep<'py>> {
        let actions = actions.as_slice().map_err(value_err)?.to_vec();
        let mut guard = lock(&self.envs)?;
        let envs = &mut *guard;
        if actions.len() != envs.len() {
            return Err(PyValueError::new_err(format!(
                "{} actions for {} environments",
                actions.len(),
                envs.len()
            )));
        }
        // Every action is checked before any environment steps, so an error
        // leaves them all where they were.
        for (i, (env, &a)) in envs.iter().zip(&actions).enumerate() {
            if !(0..N_ACTIONS as i64).contains(&a) {
                return Err(PyValueError::new_err(format!(
                    "actions[{i}] = {a}: 0 (source burst), 1, 2 or 3 (repair burst of 1, 4, 16) expected"
                )));
            }
            if !env.running {
                return Err(PyValueError::new_err("call reset() first"));
            }
        }
        let b = py.detach(|| -> PyResult<VecBuffers> {
            let mut b = VecBuffers::with(envs.len());
            for (i, (env, &a)) in envs.iter_mut().zip(&actions).enumerate() {
                let s = env.step(a)?;
                if s.done {
                    let last = RepairArrays::new(&s.obs, s.mask);
                    b.finals[i * N_FEATURES..(i + 1) * N_FEATURES].copy_from_slice(&last.features);
                    let next = env.reset_next()?;
                    b.push(&RepairStep {
                        obs: next.obs,
                        mask: next.mask,
                        ..s
                    });
                } else {
                    b.push(&s);
                }
            }
            Ok(b)
        })?;
        b.into_py(py)
    }
}
