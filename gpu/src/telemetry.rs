//! GPU telemetry through NVML.
//!
//! [`Telemetry::new`] loads `libnvidia-ml` at run time (nvml-wrapper uses
//! `dlopen`, so the crate builds and runs without a driver). Where NVML cannot be
//! loaded or the device index does not exist, telemetry is *unavailable*: one
//! `tracing` info line says why, and every [`Telemetry::sample`] returns `None`
//! quietly. A failing field (e.g. power on a card that does not report it) is
//! `None` in the sample; only the first failure per field is logged.

use std::cell::Cell;

use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

/// One reading of a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    pub index: u32,
    pub name: Option<String>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    /// Percent of time a kernel was running over the driver's last period.
    pub utilization_pct: Option<u32>,
    pub power_w: Option<f64>,
}

/// NVML sampler for one device (or a no-op when NVML is absent).
pub struct Telemetry {
    nvml: Option<Nvml>,
    index: u32,
    reason: Option<String>,
    warned: Cell<[bool; 4]>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("available", &self.nvml.is_some())
            .field("index", &self.index)
            .field("reason", &self.reason)
            .finish()
    }
}

impl Telemetry {
    /// Opens NVML for GPU `index`; never fails (see [`Telemetry::available`]).
    pub fn new(index: u32) -> Self {
        let (nvml, reason) = match Nvml::init() {
            Ok(n) => match n.device_count() {
                Ok(c) if index < c => (Some(n), None),
                Ok(c) => (
                    None,
                    Some(format!("GPU {index} does not exist ({c} found)")),
                ),
                Err(e) => (None, Some(format!("cannot count GPUs: {e}"))),
            },
            Err(e) => (None, Some(format!("NVML unavailable: {e}"))),
        };
        if let Some(r) = &reason {
            tracing::info!(gpu = index, "no GPU telemetry: {r}");
        }
        Telemetry {
            nvml,
            index,
            reason,
            warned: Cell::new([false; 4]),
        }
    }

    /// Telemetry for a device string: `cuda:N` → GPU N; anything else → unavailable.
    pub fn for_device(device: &str) -> Self {
        match crate::model::device::cuda_ordinal(device) {
            Some(i) => Telemetry::new(i),
            None => Telemetry {
                nvml: None,
                index: 0,
                reason: Some(format!("device `{device}` is not a GPU")),
                warned: Cell::new([false; 4]),
            },
        }
    }

    /// Whether samples can be taken.
    pub fn available(&self) -> bool {
        self.nvml.is_some()
    }

    /// Why telemetry is unavailable.
    pub fn unavailable_reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    fn field<T, E: std::fmt::Display>(
        &self,
        slot: usize,
        what: &str,
        r: Result<T, E>,
    ) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                let mut w = self.warned.get();
                if !w[slot] {
                    w[slot] = true;
                    self.warned.set(w);
                    tracing::info!(gpu = self.index, "NVML {what} unavailable: {e}");
                }
                None
            }
        }
    }

    /// Reads memory, utilization and power; `None` when unavailable.
    pub fn sample(&self) -> Option<GpuSample> {
        let nvml = self.nvml.as_ref()?;
        let dev = self.field(0, "device", nvml.device_by_index(self.index))?;
        let mem = self.field(1, "memory info", dev.memory_info());
        let util = self.field(2, "utilization", dev.utilization_rates());
        let power = self.field(3, "power", dev.power_usage());
        Some(GpuSample {
            index: self.index,
            name: dev.name().ok(),
            memory_used_bytes: mem.as_ref().map(|m| m.used),
            memory_total_bytes: mem.as_ref().map(|m| m.total),
            utilization_pct: util.map(|u| u.gpu),
            power_w: power.map(|mw| mw as f64 / 1000.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_device_has_no_telemetry() {
        let t = Telemetry::for_device("cpu");
        assert!(!t.available());
        assert!(t.sample().is_none());
        assert!(t.sample().is_none());
    }

    #[test]
    fn nvml_without_driver_is_quiet() {
        // On a machine without the NVIDIA driver this is unavailable; with one, a
        // sample has the total memory.
        let t = Telemetry::new(0);
        match t.sample() {
            None => assert!(t.unavailable_reason().is_some() || t.available()),
            Some(s) => assert!(s.memory_total_bytes.unwrap_or(1) > 0),
        }
    }
}
