//! Policy weights as safetensors files.
//!
//! Format (documented for PyTorch users in `policies/README.md`):
//! - every tensor is dtype `F32`, little-endian, row-major;
//! - names are `<net>.<layer>.<param>`: an [`Mlp`] under prefix `q` writes
//!   `q.0.weight` `[out, in]`, `q.0.bias` `[out]`, `q.1.weight`, …; an
//!   [`Lstm`] under prefix `ret.lstm` writes `ret.lstm.0.weight_ih`
//!   `[4H, in]`, `…weight_hh` `[4H, H]`, `…bias_ih` `[4H]`, `…bias_hh` `[4H]`;
//! - metadata (string → string): `format` = `edgemu-policy`, `kind` (e.g.
//!   `repair-ddqn`), `version` (decimal integer), `obs_mean` and `obs_std`
//!   (JSON arrays of numbers, possibly empty: `x_norm = (x − mean) / std`),
//!   `notes` (free text, optional).
//!
//! Loading checks, in order: the file can be read and parsed by the
//! safetensors crate (which bounds-checks every offset), the metadata's
//! format, kind and version, that observation statistics are finite with
//! positive std and the expected length, then every expected tensor: present,
//! `F32`, of the expected shape, every value finite; and that there is no
//! tensor the policy does not have. Each failure is a [`PolicyError`] naming
//! the file and the tensor.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

use super::error::PolicyError;
use super::lstm::Lstm;
use super::mlp::Mlp;

/// The `format` metadata value of every edgemu policy file.
pub const WEIGHTS_FORMAT: &str = "edgemu-policy";

/// One tensor a policy needs: its name and shape.
/// The largest weights file `load` reads: the project's policies are a few
/// thousand to a few hundred thousand floats, so 64 MiB leaves room for much
/// bigger nets while a mistaken or hostile path cannot exhaust memory.
pub const MAX_WEIGHTS_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
}

/// What a loader expects of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub kind: String,
    pub version: u32,
    pub tensors: Vec<TensorSpec>,
    /// Required length of `obs_mean`/`obs_std` when they are not empty.
    pub obs_dim: Option<usize>,
}

impl Expected {
    pub fn new(kind: &str, version: u32) -> Expected {
        Expected {
            kind: kind.to_string(),
            version,
            tensors: Vec::new(),
            obs_dim: None,
        }
    }

    /// Adds the tensors of an [`Mlp`] stored under `prefix`.
    pub fn with_mlp(mut self, prefix: &str, mlp: &Mlp) -> Expected {
        self.tensors.extend(mlp_specs(prefix, mlp));
        self
    }

    /// Adds the tensors of an [`Lstm`] stored under `prefix`.
    pub fn with_lstm(mut self, prefix: &str, lstm: &Lstm) -> Expected {
        self.tensors.extend(lstm_specs(prefix, lstm));
        self
    }

    pub fn with_obs_dim(mut self, dim: usize) -> Expected {
        self.obs_dim = Some(dim);
        self
    }
}

fn mlp_specs(prefix: &str, mlp: &Mlp) -> Vec<TensorSpec> {
    let s = mlp.sizes();
    (0..mlp.num_layers())
        .flat_map(|l| {
            [
                TensorSpec {
                    name: format!("{prefix}.{l}.weight"),
                    shape: vec![s[l + 1], s[l]],
                },
                TensorSpec {
                    name: format!("{prefix}.{l}.bias"),
                    shape: vec![s[l + 1]],
                },
            ]
        })
        .collect()
}

fn lstm_specs(prefix: &str, lstm: &Lstm) -> Vec<TensorSpec> {
    (0..lstm.num_layers())
        .flat_map(|l| {
            lstm.layer_tensors(l).map(|(n, shape, _)| TensorSpec {
                name: format!("{prefix}.{l}.{n}"),
                shape,
            })
        })
        .collect()
}

/// A set of named F32 tensors plus metadata: what a policy file holds.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightsFile {
    pub kind: String,
    pub version: u32,
    pub obs_mean: Vec<f32>,
    pub obs_std: Vec<f32>,
    pub notes: String,
    tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
}

impl WeightsFile {
    pub fn new(kind: &str, version: u32) -> WeightsFile {
        WeightsFile {
            kind: kind.to_string(),
            version,
            obs_mean: Vec::new(),
            obs_std: Vec::new(),
            notes: String::new(),
            tensors: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) one tensor.
    ///
    /// # Panics
    /// When `data.len()` is not the product of `shape` (a programming error).
    pub fn insert(&mut self, name: &str, shape: Vec<usize>, data: Vec<f32>) {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "tensor {name}");
        self.tensors.insert(name.to_string(), (shape, data));
    }

    /// Adds every tensor of `mlp` under `prefix`.
    pub fn insert_mlp(&mut self, prefix: &str, mlp: &Mlp) {
        for l in 0..mlp.num_layers() {
            let (w, b) = mlp.layer(l);
            let s = mlp.sizes();
            self.insert(
                &format!("{prefix}.{l}.weight"),
                vec![s[l + 1], s[l]],
                w.to_vec(),
            );
            self.insert(&format!("{prefix}.{l}.bias"), vec![s[l + 1]], b.to_vec());
        }
    }

    /// Adds every tensor of `lstm` under `prefix`.
    pub fn insert_lstm(&mut self, prefix: &str, lstm: &Lstm) {
        for l in 0..lstm.num_layers() {
            for (n, shape, data) in lstm.layer_tensors(l) {
                self.insert(&format!("{prefix}.{l}.{n}"), shape, data.to_vec());
            }
        }
    }

    /// The tensor `name`: shape and data.
    pub fn tensor(&self, name: &str) -> Option<(&[usize], &[f32])> {
        self.tensors
            .get(name)
            .map(|(s, d)| (s.as_slice(), d.as_slice()))
    }

    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Copies the tensors under `prefix` into `mlp` (shapes must match: load
    /// with an [`Expected`] built by [`Expected::with_mlp`] first).
    pub fn fill_mlp(&self, prefix: &str, mlp: &mut Mlp) -> Result<(), PolicyError> {
        for l in 0..mlp.num_layers() {
            let (w, b) = mlp.layer_mut(l);
            copy_into(self, &format!("{prefix}.{l}.weight"), w)?;
            copy_into(self, &format!("{prefix}.{l}.bias"), b)?;
        }
        Ok(())
    }

    /// Copies the tensors under `prefix` into `lstm`.
    pub fn fill_lstm(&self, prefix: &str, lstm: &mut Lstm) -> Result<(), PolicyError> {
        for l in 0..lstm.num_layers() {
            for n in ["weight_ih", "weight_hh", "bias_ih", "bias_hh"] {
                let dst = lstm
                    .layer_tensor_mut(l, n)
                    .ok_or_else(|| PolicyError::Invalid(format!("no LSTM tensor {n}")))?;
                copy_into(self, &format!("{prefix}.{l}.{n}"), dst)?;
            }
        }
        Ok(())
    }

    /// Serialises to safetensors bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, PolicyError> {
        let mut meta = HashMap::new();
        meta.insert("format".to_string(), WEIGHTS_FORMAT.to_string());
        meta.insert("kind".to_string(), self.kind.clone());
        meta.insert("version".to_string(), self.version.to_string());
        meta.insert("obs_mean".to_string(), json_array(&self.obs_mean));
        meta.insert("obs_std".to_string(), json_array(&self.obs_std));
        meta.insert("notes".to_string(), self.notes.clone());
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = self
            .tensors
            .iter()
            .map(|(n, (s, d))| {
                (
                    n.clone(),
                    s.clone(),
                    d.iter().flat_map(|v| v.to_le_bytes()).collect(),
                )
            })
            .collect();
        let mut views = Vec::with_capacity(bytes.len());
        for (n, s, b) in &bytes {
            let v =
                safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), b).map_err(|e| {
                    PolicyError::Tensor {
                        file: PathBuf::from("<bytes>"),
                        tensor: n.clone(),
                        what: e.to_string(),
                    }
                })?;
            views.push((n.clone(), v));
        }
        let fmt_err = |what: String| PolicyError::Format {
            file: PathBuf::from("<bytes>"),
            what,
        };
        // safetensors writes the metadata map in HashMap order, which differs
        // between map instances; rewrite it with sorted keys (same entries,
        // same length) so equal weights give equal bytes.
        let written = serde_json::to_string(&meta).map_err(|e| fmt_err(e.to_string()))?;
        let sorted: BTreeMap<&String, &String> = meta.iter().collect();
        let canonical = serde_json::to_string(&sorted).map_err(|e| fmt_err(e.to_string()))?;
        let mut out =
            safetensors::serialize(views, Some(meta)).map_err(|e| fmt_err(e.to_string()))?;
        let header_end = out
            .len()
            .min(8 + u64::from_le_bytes(out[..8].try_into().unwrap_or_default()) as usize);
        if let Some(at) = out[8..header_end]
            .windows(written.len())
            .position(|w| w == written.as_bytes())
        {
            out[8 + at..8 + at + canonical.len()].copy_from_slice(canonical.as_bytes());
        }
        Ok(out)
    }

    /// Writes the file (via a temporary file and a rename, so a reader never
    /// sees half a file).
    pub fn save(&self, path: &Path) -> Result<(), PolicyError> {
        let bytes = self.to_bytes()?;
        let io = |source| PolicyError::Io {
            file: path.to_path_buf(),
            source,
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, &bytes).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Reads and validates `path` against `expected`. A file larger than
    /// [`MAX_WEIGHTS_BYTES`] is refused before it is read.
    pub fn load(path: &Path, expected: &Expected) -> Result<WeightsFile, PolicyError> {
        let bytes = crate::shipped::read_weights(&edgemu_assets::Asset::File(path.to_path_buf()))?;
        WeightsFile::from_bytes(&bytes, path, expected)
    }

    /// Parses and validates safetensors `bytes`; `file` names them in errors.
    pub fn from_bytes(
        bytes: &[u8],
        file: &Path,
        expected: &Expected,
    ) -> Result<WeightsFile, PolicyError> {
        let file_buf = file.to_path_buf();
        let st = SafeTensors::deserialize(bytes).map_err(|e| PolicyError::Format {
            file: file_buf.clone(),
            what: e.to_string(),
        })?;
        let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| PolicyError::Format {
            file: file_buf.clone(),
            what: e.to_string(),
        })?;
        let empty = HashMap::new();
        let meta = header.metadata().as_ref().unwrap_or(&empty);
        let meta_err = |what: String| PolicyError::Metadata {
            file: file_buf.clone(),
            what,
        };
        let get = |k: &str| {
            meta.get(k)
                .ok_or_else(|| meta_err(format!("missing key `{k}`")))
        };
        let format = get("format")?;
        if format != WEIGHTS_FORMAT {
            return Err(meta_err(format!(
                "format is `{format}`, expected `{WEIGHTS_FORMAT}`"
            )));
        }
        let kind = get("kind")?;
        if *kind != expected.kind {
            return Err(meta_err(format!(
                "kind is `{kind}`, expected `{}`",
                expected.kind
            )));
        }
        let version: u32 = get("version")?
            .trim()
            .parse()
            .map_err(|_| meta_err(format!("version `{}` is not an integer", meta["version"])))?;
        if version != expected.version {
            return Err(meta_err(format!(
                "version is {version}, this build reads version {}",
                expected.version
            )));
        }
        let obs_mean = parse_floats(meta.get("obs_mean"), "obs_mean").map_err(meta_err)?;
        let obs_std = parse_floats(meta.get("obs_std"), "obs_std").map_err(meta_err)?;
        if obs_mean.len() != obs_std.len() {
            return Err(meta_err(format!(
                "obs_mean has {} values but obs_std has {}",
                obs_mean.len(),
                obs_std.len()
            )));
        }
        if let (Some(d), false) = (expected.obs_dim, obs_mean.is_empty()) {
            if obs_mean.len() != d {
                return Err(meta_err(format!(
                    "obs_mean/obs_std have {} values, the policy observes {d}",
                    obs_mean.len()
                )));
            }
        }
        if let Some(i) = obs_std.iter().position(|&s| s <= 0.0) {
            return Err(meta_err(format!(
                "obs_std[{i}] = {} is not positive",
                obs_std[i]
            )));
        }

        let mut tensors = BTreeMap::new();
        for spec in &expected.tensors {
            let terr = |what: String| PolicyError::Tensor {
                file: file_buf.clone(),
                tensor: spec.name.clone(),
                what,
            };
            let view = st
                .tensor(&spec.name)
                .map_err(|_| PolicyError::MissingTensor {
                    file: file_buf.clone(),
                    tensor: spec.name.clone(),
                })?;
            if view.dtype() != Dtype::F32 {
                return Err(terr(format!("dtype {:?}, expected F32", view.dtype())));
            }
            if view.shape() != spec.shape.as_slice() {
                return Err(terr(format!(
                    "shape {:?}, expected {:?}",
                    view.shape(),
                    spec.shape
                )));
            }
            let data = view.data();
            let n: usize = spec.shape.iter().product();
            if data.len() != n * 4 {
                return Err(terr(format!("{} bytes, expected {}", data.len(), n * 4)));
            }
            let values: Vec<f32> = data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if let Some(i) = values.iter().position(|v| !v.is_finite()) {
                return Err(terr(format!("element {i} is {} (not finite)", values[i])));
            }
            tensors.insert(spec.name.clone(), (spec.shape.clone(), values));
        }
        let mut names = st.names();
        names.sort();
        if let Some(extra) = names.into_iter().find(|n| !tensors.contains_key(*n)) {
            return Err(PolicyError::UnexpectedTensor {
                file: file_buf,
                tensor: extra.to_string(),
            });
        }
        Ok(WeightsFile {
            kind: kind.clone(),
            version,
            obs_mean,
            obs_std,
            notes: meta.get("notes").cloned().unwrap_or_default(),
            tensors,
        })
    }

    /// Normalises an observation in place with `obs_mean`/`obs_std` (no-op
    /// when the file has none).
    pub fn normalize(&self, x: &mut [f32]) {
        if self.obs_mean.len() == x.len() {
            for ((v, m), s) in x.iter_mut().zip(&self.obs_mean).zip(&self.obs_std) {
                *v = (*v - m) / s;
            }
        }
    }
}

fn copy_into(w: &WeightsFile, name: &str, dst: &mut [f32]) -> Result<(), PolicyError> {
    let (_, data) = w.tensor(name).ok_or_else(|| PolicyError::MissingTensor {
        file: PathBuf::from("<weights>"),
        tensor: name.to_string(),
    })?;
    if data.len() != dst.len() {
        return Err(PolicyError::Tensor {
            file: PathBuf::from("<weights>"),
            tensor: name.to_string(),
            what: format!("{} values, the net has {}", data.len(), dst.len()),
        });
    }
    dst.copy_from_slice(data);
    Ok(())
}

fn json_array(v: &[f32]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".to_string())
}

fn parse_floats(s: Option<&String>, key: &str) -> Result<Vec<f32>, String> {
    let Some(s) = s else { return Ok(Vec::new()) };
    let v: Vec<f64> = serde_json::from_str(s)
        .map_err(|e| format!("`{key}` is not a JSON array of numbers: {e}"))?;
    let out: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    if let Some(i) = out.iter().position(|x| !x.is_finite()) {
        return Err(format!("`{key}`[{i}] is not a finite f32"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::Activation;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn sample() -> (WeightsFile, Expected, Mlp, Lstm) {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mlp = Mlp::new(&[3, 4, 2], Activation::Relu, Activation::Identity, &mut rng);
        let lstm = Lstm::new(2, 3, 2, &mut rng);
        let mut w = WeightsFile::new("test-kind", 2);
        w.obs_mean = vec![0.0, 1.0, 2.0];
        w.obs_std = vec![1.0, 2.0, 3.0];
        w.notes = "unit test".into();
        w.insert_mlp("q", &mlp);
        w.insert_lstm("ret.lstm", &lstm);
        let exp = Expected::new("test-kind", 2)
            .with_mlp("q", &mlp)
            .with_lstm("ret.lstm", &lstm)
            .with_obs_dim(3);
        (w, exp, mlp, lstm)
    }

    #[test]
    fn round_trip_through_a_file() {
        let (w, exp, mlp, lstm) = sample();
        let dir = std::env::temp_dir().join(format!("edgemu-weights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.safetensors");
        w.save(&path).unwrap();
        let back = WeightsFile::load(&path, &exp).unwrap();
        assert_eq!(back, w);
        let mut m2 = Mlp::zeros(mlp.sizes(), Activation::Relu, Activation::Identity);
        back.fill_mlp("q", &mut m2).unwrap();
        assert_eq!(m2, mlp);
        let mut l2 = Lstm::zeros(2, 3, 2);
        back.fill_lstm("ret.lstm", &mut l2).unwrap();
        assert_eq!(l2, lstm);
        std::fs::remove_dir_all(&dir).ok();
    }

    fn err_of(w: &WeightsFile, exp: &Expected) -> String {
        let b = w.to_bytes().unwrap();
        WeightsFile::from_bytes(&b, Path::new("x.safetensors"), exp)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn errors_name_file_tensor_and_problem() {
        let (w, exp, _, _) = sample();
        let mut bad = w.clone();
        bad.insert("q.0.bias", vec![4], vec![0.0, f32::NAN, 0.0, 0.0]);
        let e = err_of(&bad, &exp);
        assert!(
            e.contains("x.safetensors") && e.contains("q.0.bias") && e.contains("not finite"),
            "{e}"
        );

        let mut bad = w.clone();
        bad.insert("q.0.bias", vec![2, 2], vec![0.0; 4]);
        let e = err_of(&bad, &exp);
        assert!(e.contains("q.0.bias") && e.contains("shape"), "{e}");

        let mut bad = w.clone();
        bad.tensors.remove("ret.lstm.1.bias_hh");
        assert!(err_of(&bad, &exp).contains("missing tensor `ret.lstm.1.bias_hh`"));

        let mut bad = w.clone();
        bad.insert("q.9.weight", vec![1], vec![0.0]);
        assert!(err_of(&bad, &exp).contains("unexpected tensor `q.9.weight`"));

        let mut bad = w.clone();
        bad.kind = "other".into();
        assert!(err_of(&bad, &exp).contains("kind is `other`"));

        let mut bad = w.clone();
        bad.version = 3;
        assert!(err_of(&bad, &exp).contains("version is 3"));

        let mut bad = w.clone();
        bad.obs_std[1] = 0.0;
        assert!(err_of(&bad, &exp).contains("obs_std[1]"));

        let mut bad = w.clone();
        bad.obs_mean.pop();
        bad.obs_std.pop();
        assert!(err_of(&bad, &exp).contains("the policy observes 3"));
    }

    #[test]
    fn wrong_dtype_is_named() {
        let (w, exp, _, _) = sample();
        // Rewrite one tensor as F64 with the same shape.
        let mut views: Vec<(String, Vec<usize>, Vec<u8>, Dtype)> = w
            .tensors
            .iter()
            .map(|(n, (s, d))| {
                (
                    n.clone(),
                    s.clone(),
                    d.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    Dtype::F32,
                )
            })
            .collect();
        for v in &mut views {
            if v.0 == "q.1.bias" {
                v.2 = vec![0u8; 16];
                v.3 = Dtype::F64;
            }
        }
        let mut meta = HashMap::new();
        for (k, val) in [
            ("format", WEIGHTS_FORMAT),
            ("kind", "test-kind"),
            ("version", "2"),
        ] {
            meta.insert(k.to_string(), val.to_string());
        }
        let tv: Vec<_> = views
            .iter()
            .map(|(n, s, b, d)| {
                (
                    n.clone(),
                    safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
                )
            })
            .collect();
        let bytes = safetensors::serialize(tv, Some(meta)).unwrap();
        let e = WeightsFile::from_bytes(&bytes, Path::new("f"), &exp)
            .unwrap_err()
            .to_string();
        assert!(e.contains("q.1.bias") && e.contains("F64"), "{e}");
    }

    #[test]
    fn missing_file_is_an_io_error_naming_it() {
        let (_, exp, _, _) = sample();
        let e = WeightsFile::load(Path::new("/nonexistent/w.safetensors"), &exp).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/w.safetensors"));
    }

    #[test]
    fn an_oversized_file_is_refused_before_it_is_read() {
        let (_, exp, _, _) = sample();
        let path =
            std::env::temp_dir().join(format!("edgemu-huge-{}.safetensors", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(MAX_WEIGHTS_BYTES + 1).unwrap();
        let e = WeightsFile::load(&path, &exp).unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert!(e.to_string().contains("limit"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Hostile bytes: flipped, truncated, overwritten or garbage files
        /// never panic, and a corrupted file either fails or still passes
        /// every check.
        #[test]
        fn corrupted_bytes_never_panic(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
            cut in any::<Option<usize>>(),
            garbage in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let (w, exp, _, _) = sample();
            let mut b = w.to_bytes().unwrap();
            let len = b.len();
            for (i, v) in flips {
                b[i % len] ^= v;
            }
            if let Some(c) = cut {
                b.truncate(c % (len + 1));
            }
            if let Ok(ok) = WeightsFile::from_bytes(&b, Path::new("h"), &exp) {
                for t in &exp.tensors {
                    let (s, d) = ok.tensor(&t.name).unwrap();
                    prop_assert_eq!(s, t.shape.as_slice());
                    prop_assert!(d.iter().all(|v| v.is_finite()));
                }
            }
            let _ = WeightsFile::from_bytes(&garbage, Path::new("g"), &exp);
            // A header length that claims huge sizes.
            let mut huge = u64::MAX.to_le_bytes().to_vec();
            huge.extend_from_slice(&garbage);
            prop_assert!(WeightsFile::from_bytes(&huge, Path::new("g"), &exp).is_err());
        }
    }
}
