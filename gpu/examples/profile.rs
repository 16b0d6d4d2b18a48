//! Measures a modeled-backend profile on the real backend (what `edgemu profile`
//! does) and writes it: `cargo run --release -p edgemu-gpu --example profile -- OUT.json [--device cpu] [--quick]`
use edgemu_gpu::profile::{run_profile, ProfileOptions};

fn main() {
    let mut opts = ProfileOptions::default();
    let mut out = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--device" => opts.device = args.next().unwrap_or_else(|| "cpu".into()),
            "--model" => opts.model = args.next().map(Into::into),
            "--quick" => {
                opts.batch_sizes = vec![1, 8, 32];
                opts.context_lens = vec![64, 512];
                opts.steps = 2;
            }
            p => out = Some(std::path::PathBuf::from(p)),
        }
    }
    let Some(out) = out else {
        eprintln!(
            "usage: profile OUT.json|OUT.toml [--device cpu|cuda:N] [--model FILE] [--quick]"
        );
        std::process::exit(2);
    };
    let progress = |d: usize, t: usize| eprint!("\r[{d}/{t}]");
    let r = run_profile(&opts, &progress).and_then(|p| p.save(&out).map(|_| p).map_err(Into::into));
    match r {
        Ok(p) => eprintln!(
            "\nwrote {} ({} curves, prefill {:.0} tok/s)",
            out.display(),
            p.decode.len(),
            p.prefill_tok_s
        ),
        Err(e) => {
            eprintln!("\nerror: {e}");
            std::process::exit(1);
        }
    }
}
