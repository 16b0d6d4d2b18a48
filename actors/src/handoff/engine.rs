//! [`AgentEngine`]: the compute of an agent's edge server — the real model
//! (SmolLM2, or the tiny random Llama through the same code) that prefills
//! contexts into the [`ContextKvCache`] and exports their BF16 KV, and that
//! decodes from a rebuilt cache after a handoff.
//!
//! Compute never runs on a thread that carries the data path: in real time
//! the engine lives in [`ComputeActor`] on its own arbiter thread (like the
//! real LYREO server); in virtual time the same actor runs on the host's
//! thread, so a forward pass runs inline while the paused clock cannot
//! move (DESIGN.md "One code path, two clocks"). Departure from DESIGN.md:
//! the agent does not then sleep the measured duration — a prefill happens
//! before the handoff starts, and the receiver's first decode iteration is
//! added to the TTFT it records instead — so a virtual run stays
//! reproducible by seed.
//!
//! **Decoding after a handoff.** Agent B's prompt is the handed-off context
//! followed by the ChatML cue that opens an assistant turn; only the cue is
//! prefilled, on the rebuilt cache. Time to first token counts the first
//! engine iteration (the cue's prefill, which yields the first token). The
//! reference continuation decodes from the full BF16 cache, which agent B
//! gets from its own server's cache (a prefill on a miss), so the recorded
//! agreement is that of the rebuilt cache with full-KV decoding.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use edgemu_config::{ContextSource, RealModel};
use edgemu_engine::batch::{BatchEngine, EngineConfig, Request};
use edgemu_gpu::handoff_quality::{chatml_cue, rebuild, PartialBlock};
use edgemu_gpu::kv_cache::{ContextKv, ContextKvCache};
use edgemu_gpu::kv_utility::{model_identity, KvUtilityProfile, ModelIdentity};
use edgemu_gpu::model::llama::Llama;
use edgemu_gpu::model::LoadedModel;
use edgemu_gpu::{KvDtype, MissingRows, RealBackend};
use edgemu_handoff::{cell_utilities, placeholder_utilities, BlockLayout, ReceivedKv};

use super::error::AgentError;

/// The seed of the tiny test model: every agent loads the same weights, so a
/// KV cache made by one is meaningful to another.
pub const TINY_SEED: u64 = 7;

/// One handoff context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffContext {
    pub id: String,
    pub tokens: Vec<u32>,
}

/// A prefilled (or cached) context ready to send.
#[derive(Debug, Clone)]
pub struct Prefilled {
    pub kv: Arc<ContextKv>,
    pub hit: bool,
    /// Wall-clock compute time (0 on a hit).
    pub compute_ns: u64,
}

/// What decoding after a handoff gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub tokens: Vec<u32>,
    pub text: String,
    /// Positions where the continuation equals the full-KV one, over all.
    pub agreement: f64,
    /// The first engine iteration (prefill of the cue → first token).
    pub first_token_ns: u64,
    /// All of decoding, the reference included (wall clock).
    pub compute_ns: u64,
    /// Whether agent B's cache had the context's full KV.
    pub reference_hit: bool,
}

/// The model, its context cache and its decode engine (module docs).
pub struct AgentEngine {
    model: Llama,
    decoder: BatchEngine<RealBackend>,
    lm_tokenizer: edgemu_tokenizer::Tokenizer,
    chat: Option<edgemu_tokenizer::ChatTemplate>,
    identity: ModelIdentity,
    cue: Vec<u32>,
    cache: Arc<ContextKvCache>,
    next_id: u64,
}

fn load(model: RealModel) -> Result<(LoadedModel, String), AgentError> {
    let device =
        edgemu_gpu::model::parse_device("cpu").map_err(|e| AgentError::Device(e.to_string()))?;
    match model {
        RealModel::Tiny => edgemu_gpu::model::load_tiny(TINY_SEED, &device, None)
            .map(|m| (m, "tiny-random-llama".to_string()))
            .map_err(|e| AgentError::TinyModel(e.to_string())),
        RealModel::SmolLm2 => {
            let path = edgemu_tokenizer::resolve_model_path(None)
                .map_err(|e| AgentError::ModelMissing(e.to_string()))?;
            let name = path
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            edgemu_gpu::model::load(&path, &device, None)
                .map(|m| (m, name))
                .map_err(|e| AgentError::ModelLoad(e.to_string()))
        }
    }
}

impl AgentEngine {
    /// Loads `model` twice (one copy prefills, one decodes in the engine).
    pub fn load(model: RealModel, cache: Arc<ContextKvCache>) -> Result<Self, AgentError> {
        let (lm, name) = load(model)?;
        let (decode_lm, _) = load(model)?;
        let cue = chatml_cue(&lm.tokenizer);
        if cue.is_empty() {
            return Err(AgentError::NoCue);
        }
        let decoder = BatchEngine::new(
            RealBackend::new(decode_lm.model, KvDtype::Bf16, None),
            EngineConfig {
                kv_capacity_bytes: u64::MAX / 4,
                max_batch: 2,
                ..EngineConfig::default()
            },
        );
        Ok(AgentEngine {
            identity: model_identity(&name, lm.model.config()),
            model: lm.model,
            decoder,
            lm_tokenizer: lm.tokenizer,
            chat: lm.chat,
            cue,
            cache,
            next_id: 0,
        })
    }

    /// The transport layout of a context of `n_tokens` for this model.
    pub fn layout(&self, n_tokens: u32) -> Result<BlockLayout, AgentError> {
        let c = self.model.config();
        BlockLayout::for_model(
            c.n_layers as u32,
            c.n_kv_heads as u32,
            c.head_dim as u32,
            2,
            n_tokens,
        )
        .map_err(AgentError::from)
    }

    /// Block utilities: the shipped SmolLM2 profile (built in) when it
    /// matches the model, else the placeholder (earlier layers and
    /// positions first).
    pub fn utilities(&self, layout: &BlockLayout) -> (Vec<f64>, &'static str) {
        let shipped = edgemu_gpu::shipped_profiles::default_profile();
        let measured = KvUtilityProfile::load(&shipped, &self.identity)
            .ok()
            .and_then(|p| cell_utilities(&p.cells, &p.layer_groups(), layout).ok());
        match measured {
            Some(u) => (u, "profile"),
            None => (placeholder_utilities(layout), "placeholder"),
        }
    }

    /// `count` contexts of `n_tokens` from `source`, chosen by `seed`.
    pub fn contexts(
        &self,
        source: ContextSource,
        n_tokens: u32,
        count: u32,
        seed: u64,
    ) -> Result<Vec<HandoffContext>, AgentError> {
        let chat = self.chat.as_ref().ok_or(AgentError::NoChatTemplate)?;
        let sharegpt = |e: edgemu_data::DataError| AgentError::ShareGpt(e.to_string());
        let convs = match source {
            ContextSource::Builtin => edgemu_data::builtin::conversations(),
            ContextSource::ShareGpt => {
                let path = edgemu_data::locate().map_err(sharegpt)?;
                edgemu_data::sharegpt::load(&path).map_err(sharegpt)?
            }
        };
        let sets = edgemu_data::contexts::build(
            &convs,
            &self.lm_tokenizer,
            chat,
            &edgemu_data::contexts::ContextConfig {
                tokens: n_tokens as usize,
                profiling: 0,
                evaluation: count as usize,
                seed,
            },
        )
        .map_err(|e| AgentError::Contexts {
            set: source.name(),
            n_tokens,
            reason: e.to_string(),
        })?;
        Ok(sets
            .evaluation
            .into_iter()
            .enumerate()
            .map(|(i, c)| HandoffContext {
                id: format!("{}:{}#{i}", source.name(), c.conversation_id),
                tokens: c.tokens,
            })
            .collect())
    }

    /// The context's KV from the cache, or prefilled now.
    pub fn prefill(&self, tokens: &[u32]) -> Result<Prefilled, AgentError> {
        let t = Instant::now();
        let (kv, hit) = self
            .cache
            .get_or_prefill(&self.model, tokens)
            .map_err(|e| AgentError::Prefill(e.to_string()))?;
        Ok(Prefilled {
            kv,
            hit,
            compute_ns: if hit { 0 } else { elapsed_ns(t) },
        })
    }

    fn generate(
        &mut self,
        prompt: &[u32],
        blocks: &[PartialBlock],
        mode: MissingRows,
        n: usize,
    ) -> Result<(Vec<u32>, u64), AgentError> {
        let model = self.decoder.backend().model();
        let n_tokens = prompt.len() - self.cue.len();
        let kv = rebuild(model.config(), model.device(), n_tokens, blocks, mode)
            .map_err(|e| AgentError::Rebuild(e.to_string()))?;
        let id = self.next_id;
        self.next_id += 1;
        self.decoder
            .submit_with_cache(Request::with_tokens(id, prompt.to_vec(), n), kv, 0)
            .map_err(|e| AgentError::Decode(e.to_string()))?;
        let mut first = None;
        let mut now = 0;
        while !self.decoder.is_idle() {
            let t = Instant::now();
            let step = self
                .decoder
                .step(now)
                .map_err(|e| AgentError::Decode(e.to_string()))?;
            now = step.ended_at();
            first.get_or_insert(elapsed_ns(t));
            if let Some(f) = step.finished.into_iter().find(|f| f.id == id) {
                return Ok((f.tokens, first.unwrap_or(0)));
            }
        }
        Err(AgentError::Unfinished(id))
    }

    /// Rebuilds the cache from what arrived and decodes `n` tokens, then the
    /// full-KV reference (module docs).
    pub fn decode(
        &mut self,
        context: &[u32],
        received: &ReceivedKv,
        mode: MissingRows,
        n: usize,
    ) -> Result<Decoded, AgentError> {
        let t = Instant::now();
        let full = self.prefill(context)?;
        if full.kv.blocks.len() != received.blocks.len() {
            return Err(AgentError::BlockCount {
                arrived: received.blocks.len(),
                expected: full.kv.blocks.len(),
            });
        }
        let partial: Vec<PartialBlock> = full
            .kv
            .blocks
            .iter()
            .zip(&received.blocks)
            .map(|(b, r)| {
                let half = b.k.len().min(r.bytes.len());
                PartialBlock {
                    layer: b.layer,
                    start: b.start,
                    len: b.len,
                    k: r.bytes[..half].to_vec(),
                    v: r.bytes[half..].to_vec(),
                    present: r.present.clone(),
                }
            })
            .collect();
        let mut prompt = context.to_vec();
        prompt.extend_from_slice(&self.cue);
        let (tokens, first_token_ns) = self.generate(&prompt, &partial, mode, n)?;
        let complete: Vec<PartialBlock> =
            full.kv.blocks.iter().map(PartialBlock::complete).collect();
        let (reference, _) = self.generate(&prompt, &complete, mode, n)?;
        let same = tokens
            .iter()
            .zip(&reference)
            .filter(|(a, b)| a == b)
            .count();
        let agreement = same as f64 / reference.len().max(1) as f64;
        Ok(Decoded {
            text: self.lm_tokenizer.decode(&tokens, true),
            tokens,
            agreement,
            first_token_ns,
            compute_ns: elapsed_ns(t),
            reference_hit: full.hit,
        })
    }
}

fn elapsed_ns(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The engine as an actor (module docs). Answers `Err` when the model could
/// not be loaded.
pub struct ComputeActor {
    engine: Result<AgentEngine, AgentError>,
}

impl ComputeActor {
    pub fn new(engine: Result<AgentEngine, AgentError>) -> Self {
        ComputeActor { engine }
    }
}

impl Actor for ComputeActor {
    type Context = Context<Self>;
}

/// Contexts, layout and utilities for a handoff task.
#[derive(Message)]
#[rtype(result = "Result<TaskSetup, AgentError>")]
pub struct SetupTask {
    pub source: ContextSource,
    pub n_tokens: u32,
    pub count: u32,
    pub seed: u64,
}

#[derive(Debug, Clone)]
pub struct TaskSetup {
    pub contexts: Vec<HandoffContext>,
    pub layout: BlockLayout,
    pub utilities: Arc<[f64]>,
    pub utilities_from: &'static str,
}

/// Prefill (or find in the cache) one context.
#[derive(Message)]
#[rtype(result = "Result<Prefilled, AgentError>")]
pub struct Prefill(pub Vec<u32>);

/// Rebuild and decode after a handoff.
#[derive(Message)]
#[rtype(result = "Result<Decoded, AgentError>")]
pub struct Decode {
    pub context: Vec<u32>,
    pub received: ReceivedKv,
    pub mode: MissingRows,
    pub tokens: usize,
}

impl ComputeActor {
    fn engine(&mut self) -> Result<&mut AgentEngine, AgentError> {
        self.engine
            .as_mut()
            .map_err(|e| AgentError::NoModel(Box::new(e.clone())))
    }
}

impl Handler<SetupTask> for ComputeActor {
    type Result = Result<TaskSetup, AgentError>;
    fn handle(&mut self, m: SetupTask, _: &mut Context<Self>) -> Self::Result {
        let e = self.engine()?;
        let contexts = e.contexts(m.source, m.n_tokens, m.count, m.seed)?;
        let layout = e.layout(m.n_tokens)?;
        let (u, from) = e.utilities(&layout);
        Ok(TaskSetup {
            contexts,
            layout,
            utilities: u.into(),
            utilities_from: from,
        })
    }
}

impl Handler<Prefill> for ComputeActor {
    type Result = Result<Prefilled, AgentError>;
    fn handle(&mut self, m: Prefill, _: &mut Context<Self>) -> Self::Result {
        self.engine()?.prefill(&m.0)
    }
}

impl Handler<Decode> for ComputeActor {
    type Result = Result<Decoded, AgentError>;
    fn handle(&mut self, m: Decode, _: &mut Context<Self>) -> Self::Result {
        self.engine()?
            .decode(&m.context, &m.received, m.mode, m.tokens)
    }
}
