//! Why repairs are redundant: the harness loop of `run_handoff`, unrolled so
//! that every repair the receiver gets is classified — innovative, or
//! redundant with its whole span `[first_id, first_id + count)` already below
//! the receiver's decoded prefix, or redundant otherwise — for the deficit
//! heuristic at the paper setting (ρ = 0.8, SmolLM2's layout; the transport
//! does not depend on the utilities, so the placeholder ones do).
//!
//!     cargo run -p edgemu-handoff --example redundant_repairs -- [SEEDS] [K]

use std::sync::Arc;

use edgemu_codec::fec::packet::{parse, PacketBody};
use edgemu_handoff::harness::REVERSE_SEED_XOR;
use edgemu_handoff::scheme::scheme;
use edgemu_handoff::train::FINAL_SEED_BASE;
use edgemu_handoff::{placeholder_utilities, synthetic_payload, BlockLayout, HandoffScenario};
use edgemu_links::LinkModel;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let seeds: u64 = args.next().map_or(Ok(4), |s| s.parse())?;
    let layout = BlockLayout::smollm2(1536)?;
    let u: Arc<[f64]> = placeholder_utilities(&layout).into();
    let mut sc = HandoffScenario::paper(layout, u, synthetic_payload(&layout, 1), 0.8);
    if let Some(k) = args.next() {
        sc.k = k.parse()?;
    }
    let spec = scheme("deficit-heuristic")?;
    println!("seed  repairs_sent  received  innovative  redundant_below_prefix  redundant_other  max_window");
    for i in 0..seeds {
        let seed = FINAL_SEED_BASE + i;
        let mut tx = sc.sender(spec, true, spec.scheduler(None)?, false)?;
        let mut rx = sc.receiver()?;
        let deadline = sc.deadline_ns();
        let mut fwd: LinkModel<Vec<u8>> = LinkModel::new(sc.forward.clone(), seed);
        let mut rev: LinkModel<Vec<u8>> =
            LinkModel::new(sc.reverse.clone(), seed ^ REVERSE_SEED_XOR);
        let (mut received, mut innovative, mut below, mut other, mut max_window) = (0, 0, 0, 0, 0);
        let mut now = 0u64;
        loop {
            while let Some(a) = fwd.poll(now) {
                let before = rx.feedback();
                let innovative_before = rx.report().innovative_repairs;
                let _ = rx.handle_packet(a.due_ns, &a.packet);
                if let Ok(PacketBody::Repair(r)) = parse(&a.packet).map(|p| p.body) {
                    received += 1;
                    if rx.report().innovative_repairs > innovative_before {
                        innovative += 1;
                    } else if r.header.first_id + u32::from(r.header.count) <= before.cumulative {
                        below += 1;
                    } else {
                        other += 1;
                    }
                }
                if let Some(fb) = rx.poll_transmit(a.due_ns) {
                    rev.offer(a.due_ns, fb.len() as u32, fb);
                }
            }
            while let Some(a) = rev.poll(now) {
                let _ = tx.handle_feedback(a.due_ns, &a.packet);
            }
            while let Some(frame) = tx.poll_transmit(now) {
                fwd.offer(now, frame.len() as u32, frame);
            }
            max_window = max_window.max(tx.observation(now).window);
            let next = [tx.poll_timeout(), fwd.next_due(), rev.next_due()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= deadline => now = t.max(now),
                _ => break,
            }
        }
        println!(
            "{i:>4}  {:>12}  {received:>8}  {innovative:>10}  {below:>22}  {other:>15}  {max_window:>10}",
            tx.stats().repair_sent
        );
    }
    Ok(())
}
