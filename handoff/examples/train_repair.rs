//! The training of `edgemu train repair` without the CLI's dependencies
//! (same library function, same configuration, same outputs), for machines
//! where the full `edgemu` release build is too slow to wait for:
//!
//!     cargo run --release -p edgemu-handoff --example train_repair -- EPISODES SEED OUT_DIR

use edgemu_handoff::train::output::{summary, write_outputs};
use edgemu_handoff::train::{train, Progress, TrainConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let episodes: u32 = args.next().map_or(Ok(160), |s| s.parse())?;
    let seed: u64 = args.next().map_or(Ok(1), |s| s.parse())?;
    let out = std::path::PathBuf::from(args.next().unwrap_or("results/train-repair".into()));
    std::fs::create_dir_all(&out)?;
    let cfg = TrainConfig::standard(episodes, seed)?;
    let start = std::time::Instant::now();
    let mut outcome = train(&cfg, |p| match p {
        Progress::Episode(r) => eprintln!(
            "{:>7.1}s episode {:>4} eps {:.3} utility {:.4} loss {:.3e} transitions {}",
            start.elapsed().as_secs_f64(),
            r.episode,
            r.epsilon,
            r.recovered_utility,
            r.loss,
            r.transitions
        ),
        Progress::Evaluation(e) => eprintln!("checkpoint {}: {}", e.episode, summary(e)),
        Progress::Final(e) => eprintln!("final, held-out seeds: {}", summary(e)),
    })?;
    let cmd = format!("edgemu train repair --episodes {episodes} --seed {seed}");
    let w = write_outputs(&out, &cmd, &mut outcome)?;
    println!(
        "trained in {:.1} s; wrote {}",
        start.elapsed().as_secs_f64(),
        w.display()
    );
    Ok(())
}
