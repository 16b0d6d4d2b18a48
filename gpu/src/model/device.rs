//! Device strings: `cpu`, `cuda` (= `cuda:0`) or `cuda:N`.
//!
//! CUDA devices need the crate's `cuda` cargo feature; without it, asking for one
//! is an error that says so.

use candle_core::Device;

use crate::error::{GpuError, Result};

/// Parses a device string and opens the device.
pub fn parse_device(s: &str) -> Result<Device> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("cpu") {
        return Ok(Device::Cpu);
    }
    let ordinal = match s.strip_prefix("cuda") {
        Some("") => 0,
        Some(rest) => rest
            .strip_prefix(':')
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| GpuError::Device {
                device: s.to_string(),
                msg: "expected `cpu`, `cuda` or `cuda:N`".into(),
            })?,
        None => {
            return Err(GpuError::Device {
                device: s.to_string(),
                msg: "expected `cpu`, `cuda` or `cuda:N`".into(),
            })
        }
    };
    open_cuda(s, ordinal)
}

#[cfg(feature = "cuda")]
fn open_cuda(s: &str, ordinal: usize) -> Result<Device> {
    Device::new_cuda(ordinal).map_err(|e| GpuError::Device {
        device: s.to_string(),
        msg: e.to_string(),
    })
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(s: &str, _ordinal: usize) -> Result<Device> {
    Err(GpuError::Device {
        device: s.to_string(),
        msg: "this build has no CUDA support (rebuild with `--features cuda`)".into(),
    })
}

/// The CUDA ordinal of a device string (`cuda:N`), if any.
pub fn cuda_ordinal(s: &str) -> Option<u32> {
    let rest = s.trim().strip_prefix("cuda")?;
    if rest.is_empty() {
        return Some(0);
    }
    rest.strip_prefix(':')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert!(parse_device("cpu").unwrap().is_cpu());
        assert!(parse_device("gpu7").is_err());
        assert!(parse_device("cuda:x").is_err());
        assert_eq!(cuda_ordinal("cuda:3"), Some(3));
        assert_eq!(cuda_ordinal("cuda"), Some(0));
        assert_eq!(cuda_ordinal("cpu"), None);
        #[cfg(not(feature = "cuda"))]
        assert!(parse_device("cuda:0")
            .unwrap_err()
            .to_string()
            .contains("--features cuda"));
    }
}
