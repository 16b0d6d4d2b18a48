//! llama.cpp through `llama-cpp-python`, measured in a `python3` subprocess
//! running `scripts/llama_cpp_baseline.py` (compiled in; `EDGEMU_LLAMA_CPP_SCRIPT`
//! names another file) on the same GGUF (random weights
//! are written to a temporary file first) and the same token ids.
//!
//! Not installed → [`Baseline::Unavailable`] saying so; CI does not install it.
//! Build it for this VM with AMX off (the VM cannot run AMX code):
//! `CMAKE_ARGS="-DGGML_AMX=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" pip install llama-cpp-python`.

use std::path::{Path, PathBuf};
use std::process::Command;

use edgemu_tokenizer::resolve_model_path;
use serde::Deserialize;

use crate::baseline::{Baseline, BaselineFigures, BaselineWorkload};
use crate::model::ModelSource;

/// The measuring script, compiled in (`scripts/llama_cpp_baseline.py`).
const SCRIPT: &str = include_str!("../../../scripts/llama_cpp_baseline.py");

/// How the script is run: the file `EDGEMU_LLAMA_CPP_SCRIPT` names, else
/// the built-in copy as `python3 -c SCRIPT`; and its name for messages.
fn script_command() -> (Command, String) {
    let mut cmd = Command::new(python());
    match std::env::var_os("EDGEMU_LLAMA_CPP_SCRIPT").filter(|v| !v.is_empty()) {
        Some(file) => {
            let name = PathBuf::from(&file).display().to_string();
            cmd.arg(file);
            (cmd, name)
        }
        None => {
            cmd.arg("-c").arg(SCRIPT);
            (cmd, "built-in scripts/llama_cpp_baseline.py".to_string())
        }
    }
}

fn python() -> String {
    std::env::var("EDGEMU_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The llama-cpp-python version, or why it cannot be used.
pub fn installed() -> Result<String, String> {
    let out = Command::new(python())
        .args(["-c", "import llama_cpp; print(llama_cpp.__version__)"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err("llama-cpp-python is not installed (`import llama_cpp` failed)".into())
    }
}

#[derive(Debug, Deserialize)]
struct ScriptOutput {
    prefill_tok_s: f64,
    decode_b1_tok_s: f64,
    decode_b16_tok_s: Option<f64>,
    version: String,
    n_threads: usize,
}

fn ids(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn run(gguf: &Path, work: &BaselineWorkload, version: &str) -> Result<BaselineFigures, String> {
    let (mut cmd, script) = script_command();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    cmd.arg("--model")
        .arg(gguf)
        .args(["--threads", &threads.to_string()])
        .args(["--steps", &work.steps.to_string()])
        .args(["--prefill-ids", &ids(&work.prefill_prompt)]);
    for p in work.decode_prompts.iter().take(16) {
        cmd.args(["--decode-ids", &ids(p)]);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {script}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").chars().take(300);
        return Err(format!(
            "{script} failed ({}): {}",
            out.status,
            last.collect::<String>()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    let o: ScriptOutput =
        serde_json::from_str(line).map_err(|e| format!("{script}: unreadable output: {e}"))?;
    Ok(BaselineFigures {
        prefill_200_tok_s: o.prefill_tok_s,
        decode_b1_tok_s: o.decode_b1_tok_s,
        decode_b16_tok_s: o.decode_b16_tok_s,
        batch16: "llama_decode of one llama_batch holding 16 sequences per step".into(),
        notes: format!(
            "llama-cpp-python {version} (llama.cpp {}), {} threads",
            o.version, o.n_threads
        ),
    })
}

/// Measures llama.cpp on `work`, or says why it cannot.
pub fn measure(source: &ModelSource, work: &BaselineWorkload) -> Baseline {
    let unavailable = |reason: String| Baseline::Unavailable { reason };
    let version = match installed() {
        Ok(v) => v,
        Err(e) => return unavailable(e),
    };
    let result = match source {
        ModelSource::File(f) => match resolve_model_path(f.as_deref()) {
            Ok(p) => run(&p, work, &version),
            Err(e) => Err(e.to_string()),
        },
        ModelSource::Random(w) => {
            let path = std::env::temp_dir().join(format!(
                "edgemu-random-{}-{}-{}.gguf",
                w.arch.name(),
                w.seed,
                std::process::id()
            ));
            let r = crate::model::random::try_random_gguf(w.arch, w.seed)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    std::fs::write(&path, b).map_err(|e| format!("{}: {e}", path.display()))
                })
                .and_then(|_| run(&path, work, &version));
            let _ = std::fs::remove_file(&path);
            r
        }
    };
    match result {
        Ok(f) => Baseline::Measured(f),
        Err(e) => unavailable(e),
    }
}
