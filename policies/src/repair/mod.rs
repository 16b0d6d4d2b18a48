//! Repair schedulers for the KV-cache handoff (PriorityFEC, paper §IV-B–C).
//!
//! At each decision epoch the handoff sender builds a [`RepairObservation`]
//! (the paper's 15 normalized features plus the raw counters they come from)
//! and an [`ActionMask`] (the hard feasibility masks of §IV-C2), and asks a
//! [`RepairScheduler`] for one [`RepairAction`]: a source burst of at most 8
//! packets, or a repair burst of 1, 4 or 16 packets. The scheduler only decides
//! *when* to spend transmission opportunities on repair; the source order and
//! the coding rule (ACK-sliding streaming RLC) belong to the sender.
//!
//! The exact definition of each feature is documented on
//! [`RepairObservation::features`] and computed in `edgemu-handoff`'s sender.
//!
//! Baselines (see [`baselines`]): [`NoRepair`] (UDP, Priority-only),
//! [`FixedRate`] (Uniform FEC, Priority+Fixed FEC), [`FlecRt`] (FlEC-RT) and
//! [`DeficitHeuristic`] (seeds the DDQN replay). The learned scheduler is in
//! [`ddqn`].

pub mod baselines;
pub mod ddqn;

pub use baselines::{DeficitHeuristic, FixedRate, FlecRt, NoRepair};

/// Number of observation features (paper §IV-C1).
pub const N_FEATURES: usize = 15;
/// Number of actions.
pub const N_ACTIONS: usize = 4;
/// Most source packets one source action sends.
pub const SOURCE_BURST: u32 = 8;

/// One scheduling decision. The index (`as usize`, [`RepairAction::index`]) is
/// the Q-network output order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepairAction {
    /// A source burst of `min(8, source left, slots left)` packets.
    Source = 0,
    /// One repair packet.
    Repair1 = 1,
    /// A burst of 4 repair packets.
    Repair4 = 2,
    /// A burst of 16 repair packets.
    Repair16 = 3,
}

impl RepairAction {
    /// Every action in index order.
    pub const ALL: [RepairAction; N_ACTIONS] = [
        RepairAction::Source,
        RepairAction::Repair1,
        RepairAction::Repair4,
        RepairAction::Repair16,
    ];

    /// Position in the Q-network output.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The action at `index`, `None` outside 0..4.
    pub fn from_index(index: usize) -> Option<RepairAction> {
        Self::ALL.get(index).copied()
    }

    /// Repair packets this action sends (0 for `Source`).
    pub fn repair_packets(self) -> u32 {
        match self {
            RepairAction::Source => 0,
            RepairAction::Repair1 => 1,
            RepairAction::Repair4 => 4,
            RepairAction::Repair16 => 16,
        }
    }

    /// The repair action of burst `k` (1, 4 or 16).
    pub fn repair_of(k: u32) -> Option<RepairAction> {
        match k {
            1 => Some(RepairAction::Repair1),
            4 => Some(RepairAction::Repair4),
            16 => Some(RepairAction::Repair16),
            _ => None,
        }
    }
}

/// Which actions are feasible now, indexed like [`RepairAction::index`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ActionMask(pub [bool; N_ACTIONS]);

impl ActionMask {
    pub fn allows(&self, a: RepairAction) -> bool {
        self.0[a.index()]
    }

    /// Whether any action is feasible.
    pub fn any(&self) -> bool {
        self.0.iter().any(|&x| x)
    }

    /// The first feasible action in index order (the sender's fallback when a
    /// scheduler answers a masked action).
    pub fn first_allowed(&self) -> Option<RepairAction> {
        RepairAction::ALL.into_iter().find(|&a| self.allows(a))
    }

    /// The largest feasible repair burst not above `k`, if any.
    pub fn largest_repair_up_to(&self, k: u32) -> Option<RepairAction> {
        [
            RepairAction::Repair16,
            RepairAction::Repair4,
            RepairAction::Repair1,
        ]
        .into_iter()
        .find(|&a| a.repair_packets() <= k && self.allows(a))
    }
}

/// What the sender knows at a decision epoch: the 15 normalized features of
/// paper §IV-C1 (the DDQN input) and the raw counters behind them (for rule
/// based schedulers and the reward).
///
/// `features`, in the paper's order (each clipped to [0, 1]):
///
/// | # | name | definition |
/// |---|---|---|
/// | 0 | b | remaining repair budget `B_rem / B_rep` (0 when `B_rep` = 0) |
/// | 1 | τ | remaining packet slots `T_rem / T_max` |
/// | 2 | p_src | source pressure `src_rem / max(1, T_rem)` |
/// | 3 | s_ddl | deadline slack `0.5 + 0.5·clamp((T_rem − src_rem) / T_max, −1, 1)` |
/// | 4 | ε̂ | loss estimate from feedback: lost / (lost + received) frames up to the last reported seq |
/// | 5 | β | burst tendency `1 − 1/L̄`, L̄ the mean loss-run length reported (0 without losses) |
/// | 6 | δ | deficit `d / max(1, W)` |
/// | 7 | χ | deficit severity `d / max(1, d + B_rem)` |
/// | 8 | w | window scale `ln(1 + W) / ln(1 + N)` |
/// | 9 | w_fb | receiver's unresolved span `unknowns_fb / K` |
/// | 10 | h_ack | ACK staleness: time since the prefix last advanced / (4·RTT) |
/// | 11 | g | progress of the current block: its fragments already sent / its fragments |
/// | 12 | Ū | utility of the current block / the largest block utility |
/// | 13 | Ū⁺ | mean utility of the next 8 blocks in send order / the largest |
/// | 14 | p_eff | repair effectiveness `(1 − ε̂)·min(K, W) / max(1, W)` (0 when W = 0) |
///
/// with `W` the sender's unacknowledged coding window, `d` the estimated
/// deficit (see [`RepairObservation::deficit`]), `N` the source packets of the
/// handoff and `K` the coding window limit.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RepairObservation {
    pub features: [f32; N_FEATURES],
    /// Source packets of the whole handoff (N).
    pub n_source: u32,
    /// Source packets not sent yet.
    pub source_left: u32,
    /// Packet slots left before the deadline (`T_rem`).
    pub slots_left: u32,
    /// Packet slots of the handoff (`T_max`).
    pub slots_total: u32,
    /// Repair packets that may still be sent (`B_rem`).
    pub budget_left: u32,
    /// Repair budget of the handoff (`B_rep`).
    pub budget_total: u32,
    /// Source packets sent so far.
    pub source_sent: u32,
    /// Repair packets sent so far.
    pub repair_sent: u32,
    /// Source packets sent since the last repair packet.
    pub source_since_repair: u32,
    /// Estimated deficit `d`: the deficit of the latest feedback minus the
    /// repairs sent after the last frame that feedback had seen (saturating).
    pub deficit: u32,
    /// Deficit as the latest feedback reported it.
    pub deficit_reported: u32,
    /// Unacknowledged coding window `W` (source packets from the receiver's
    /// reported prefix to the last one sent).
    pub window: u32,
    /// Frames sent after the last frame the latest feedback had seen (in flight
    /// or lost, not yet reported).
    pub unreported: u32,
    /// Repair frames among those.
    pub repairs_unreported: u32,
    /// Coding window limit K of one repair.
    pub k: u32,
    /// Cumulative decoded prefix reported (`k_dec`).
    pub decoded_prefix: u32,
    /// Loss estimate ε̂ (raw, not clipped).
    pub loss_estimate: f64,
    /// Mean loss-run length L̄ reported (0 without losses).
    pub mean_loss_run: f64,
    /// Round-trip time in packet slots (nominal).
    pub rtt_slots: u32,
}

/// A repair scheduler: one decision per epoch, always one the mask allows
/// (the sender falls back to [`ActionMask::first_allowed`] and counts a
/// violation otherwise).
pub trait RepairScheduler: Send {
    fn name(&self) -> &str;
    fn decide(&mut self, obs: &RepairObservation, mask: ActionMask) -> RepairAction;
    /// Called at the start of each handoff (state of a previous one dropped).
    fn reset(&mut self) {}
}

impl<T: RepairScheduler + ?Sized> RepairScheduler for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn decide(&mut self, obs: &RepairObservation, mask: ActionMask) -> RepairAction {
        (**self).decide(obs, mask)
    }
    fn reset(&mut self) {
        (**self).reset()
    }
}
