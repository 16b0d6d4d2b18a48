//! Prints the decode benchmark (what `edgemu bench decode` shows).
//!
//! `cargo run --release -p edgemu-gpu --example bench_decode -- [--json] [--quick] [--device cpu|cuda:N] [--model FILE | --random-weights [ARCH:]SEED] [--layout PREFILL,DECODE] [--batches 1,4,16,32] [--no-baselines]`
use edgemu_gpu::bench::{run_decode_bench_with_progress, DecodeBenchOptions};
use edgemu_gpu::model::{WeightFormat, WeightLayout};

fn main() {
    let mut opts = DecodeBenchOptions::default();
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = true,
            "--quick" => opts.quick = true,
            "--device" => opts.device = args.next().unwrap_or_else(|| "cpu".into()),
            "--model" => opts.model = args.next().map(Into::into),
            "--no-baselines" => opts.baselines = false,
            "--random-weights" => match args.next().unwrap_or_default().parse() {
                Ok(r) => opts.random_weights = Some(r),
                Err(e) => {
                    eprintln!("bad --random-weights: {e}");
                    std::process::exit(2);
                }
            },
            "--batches" => {
                let v = args.next().unwrap_or_default();
                match v
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<Vec<usize>, _>>()
                {
                    Ok(b) => opts.batches = b,
                    Err(e) => {
                        eprintln!("bad --batches `{v}`: {e}");
                        std::process::exit(2);
                    }
                }
            }
            "--layout" => {
                let v = args.next().unwrap_or_default();
                let (p, d) = v.split_once(',').unwrap_or((&v, &v));
                match (WeightFormat::parse(p), WeightFormat::parse(d)) {
                    (Some(prefill), Some(decode)) => {
                        opts.layout = Some(WeightLayout { prefill, decode })
                    }
                    _ => {
                        eprintln!(
                            "bad --layout `{v}` (formats: keep, q4_0, q8_0, f32, f16, q8_cpu)"
                        );
                        std::process::exit(2);
                    }
                }
            }
            other => {
                eprintln!("unknown argument `{other}`");
                std::process::exit(2);
            }
        }
    }
    let progress = |d: usize, t: usize| eprint!("\r[{d}/{t}]");
    match run_decode_bench_with_progress(&opts, &progress) {
        Ok(r) => {
            eprintln!();
            if json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                print!("{}", r.table());
            }
        }
        Err(e) => {
            eprintln!("\nerror: {e}");
            std::process::exit(1);
        }
    }
}
