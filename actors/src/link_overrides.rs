//! What control and chaos have done to one link direction: a stack of
//! overrides over the configured parameters, each healing its own layer.
//!
//! Semantics (documented in `docs/cluster-toml.md`, "Overlapping faults"):
//! - `link.set` pushes a layer holding its patch; `link.kill` pushes a layer
//!   that holds the link down. A layer given `for` is removed when its time
//!   is up (and only that layer); one without `for` stays.
//! - The effective parameters are the configured ones with every live set
//!   layer applied in the order they were pushed (the latest wins on the
//!   keys it names); the link is down while any kill layer lives, or while
//!   a flap holds it down.
//! - `link.restore` removes every kill layer and stops any flapping; set
//!   layers stay (a timed one still heals on its own).
//! - A permanent set layer with nothing below it is folded into the base,
//!   so a long run of permanent `link.set`s holds no memory; at most
//!   [`MAX_LAYERS`] layers live at once, a command beyond that is refused.
//!
//! So a kill `for 2s` followed by a `link.set` one second later comes back
//! up at 2 s with the new parameters, and a `link.set … for` nested inside
//! another heals to the outer one, then to the configured values.

use edgemu_config::LinkPatch;
use edgemu_links::LinkParams;

/// Live layers one link direction holds at most.
pub const MAX_LAYERS: usize = 64;

/// Handle of a timed layer, given back to expire it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LayerId(pub u64);

#[derive(Debug, Clone, PartialEq)]
enum Layer {
    Kill,
    Set(LinkPatch),
}

#[derive(Debug, Clone)]
pub struct LinkOverrides {
    /// Configured parameters with folded permanent sets.
    base: LinkParams,
    layers: Vec<(LayerId, Layer, bool)>,
    next: u64,
    flap_down: bool,
    /// Bumped by `restore`, so a flap process started before it stops.
    flap_epoch: u64,
}

/// Refused: too many overlapping overrides on one link direction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("too many overlapping overrides on this link direction (at most {MAX_LAYERS}); restore it or wait for timed ones to heal")]
pub struct TooManyLayers;

impl LinkOverrides {
    pub fn new(configured: LinkParams) -> Self {
        LinkOverrides {
            base: configured,
            layers: Vec::new(),
            next: 0,
            flap_down: false,
            flap_epoch: 0,
        }
    }

    fn push(&mut self, layer: Layer, timed: bool) -> Result<LayerId, TooManyLayers> {
        if self.layers.len() >= MAX_LAYERS {
            return Err(TooManyLayers);
        }
        self.next += 1;
        let id = LayerId(self.next);
        self.layers.push((id, layer, timed));
        self.fold();
        Ok(id)
    }

    /// Folds permanent set layers at the bottom of the set layers into the
    /// base (kill layers do not touch parameters, so they do not block it).
    fn fold(&mut self) {
        loop {
            let first_set = self
                .layers
                .iter()
                .position(|(_, l, _)| matches!(l, Layer::Set(_)));
            let Some(i) = first_set else { return };
            let (_, layer, timed) = &self.layers[i];
            if *timed {
                return;
            }
            if let Layer::Set(p) = layer {
                p.apply(&mut self.base);
            }
            self.layers.remove(i);
        }
    }

    /// Holds the link down; `timed` layers are expired by [`Self::expire`].
    pub fn kill(&mut self, timed: bool) -> Result<LayerId, TooManyLayers> {
        self.push(Layer::Kill, timed)
    }

    pub fn set(&mut self, patch: LinkPatch, timed: bool) -> Result<LayerId, TooManyLayers> {
        self.push(Layer::Set(patch), timed)
    }

    /// Removes every kill layer and stops flapping.
    pub fn restore(&mut self) {
        self.layers.retain(|(_, l, _)| !matches!(l, Layer::Kill));
        self.flap_down = false;
        self.flap_epoch += 1;
        self.fold();
    }

    /// A timed layer's time is up: remove it (no-op if `restore` did).
    pub fn expire(&mut self, id: LayerId) {
        self.layers.retain(|(i, _, _)| *i != id);
        self.fold();
    }

    /// The flap process now running (see [`Self::flap_epoch`]) sets its state.
    pub fn set_flap_down(&mut self, down: bool) {
        self.flap_down = down;
    }

    /// Starts a new flap process: returns its epoch; it stops once the
    /// epoch changes.
    pub fn start_flap(&mut self) -> u64 {
        self.flap_epoch += 1;
        self.flap_down = false;
        self.flap_epoch
    }

    pub fn flap_down(&self) -> bool {
        self.flap_down
    }

    pub fn flap_epoch(&self) -> u64 {
        self.flap_epoch
    }

    pub fn is_down(&self) -> bool {
        self.flap_down || self.layers.iter().any(|(_, l, _)| matches!(l, Layer::Kill))
    }

    /// The parameters the link should have now.
    pub fn params(&self) -> LinkParams {
        let mut p = self.base.clone();
        for (_, l, _) in &self.layers {
            if let Layer::Set(patch) = l {
                patch.apply(&mut p);
            }
        }
        p
    }

    pub fn layers(&self) -> usize {
        self.layers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_links::RateSpec;

    fn rate(mbps: u64) -> LinkPatch {
        LinkPatch {
            rate: Some(RateSpec::Fixed {
                bps: mbps * 1_000_000,
            }),
            ..Default::default()
        }
    }

    fn configured() -> LinkParams {
        LinkParams {
            rate: RateSpec::Fixed { bps: 50_000_000 },
            ..Default::default()
        }
    }

    #[test]
    fn a_set_during_a_timed_kill_does_not_keep_the_link_down() {
        let mut o = LinkOverrides::new(configured());
        let k = o.kill(true).unwrap();
        o.set(rate(20), false).unwrap();
        assert!(o.is_down());
        o.expire(k);
        assert!(!o.is_down());
        assert_eq!(o.params().rate, RateSpec::Fixed { bps: 20_000_000 });
    }

    #[test]
    fn nested_timed_sets_heal_layer_by_layer() {
        let mut o = LinkOverrides::new(configured());
        let outer = o.set(rate(5), true).unwrap();
        let inner = o.set(rate(10), true).unwrap();
        assert_eq!(o.params().rate, RateSpec::Fixed { bps: 10_000_000 });
        o.expire(inner);
        assert_eq!(o.params().rate, RateSpec::Fixed { bps: 5_000_000 });
        o.expire(outer);
        assert_eq!(o.params(), configured());
        // Healed in the other order, the link still ends configured.
        let outer = o.set(rate(5), true).unwrap();
        let inner = o.set(rate(10), true).unwrap();
        o.expire(outer);
        assert_eq!(o.params().rate, RateSpec::Fixed { bps: 10_000_000 });
        o.expire(inner);
        assert_eq!(o.params(), configured());
    }

    #[test]
    fn permanent_sets_fold_and_layers_are_bounded() {
        let mut o = LinkOverrides::new(configured());
        for i in 0..10_000 {
            o.set(rate(1 + i % 7), false).unwrap();
        }
        assert_eq!(o.layers(), 0);
        for _ in 0..MAX_LAYERS {
            o.kill(true).unwrap();
        }
        assert_eq!(o.kill(true), Err(TooManyLayers));
        o.restore();
        assert_eq!(o.layers(), 0);
        assert!(!o.is_down());
    }
}
