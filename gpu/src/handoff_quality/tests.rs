use super::*;
use crate::kv_transfer::export;
use crate::model::{load_tiny, LoadedModel, WeightLayout};

const N: usize = 20;

fn tiny() -> LoadedModel {
    load_tiny(
        7,
        &Device::Cpu,
        Some(WeightLayout::for_device(&Device::Cpu)),
    )
    .unwrap()
}

fn context() -> Vec<u32> {
    (0..N as u32).map(|i| 3 + (i * 29) % 200).collect()
}

/// A prefilled cache of `N` tokens cut into BF16 blocks of 8 tokens per layer.
fn hand_built(model: &Llama) -> Vec<KvBlock> {
    let ctx = context();
    let kv = model.prefilled(&ctx, N).unwrap();
    let mut blocks = Vec::new();
    for l in 0..model.config().n_layers {
        for s in (0..N).step_by(8) {
            blocks.extend(export(&kv, l..l + 1, s..(s + 8).min(N), KvDtype::Bf16).unwrap());
        }
    }
    blocks
}

/// Bytes of `kv` as one BF16 block per layer over all tokens.
fn bytes_of(kv: &SeqKv) -> Vec<KvBlock> {
    (0..kv.n_layers())
        .flat_map(|l| export(kv, l..l + 1, 0..N, KvDtype::Bf16).unwrap())
        .collect()
}

/// Byte offset of element `e` of row (h, t) in a block's K (add `k.len()` for V).
fn at(b: &KvBlock, h: usize, t: usize, e: usize) -> usize {
    ((h * b.len + t) * b.head_dim + e) * 2
}

/// Block 0 (layer 0, tokens 0..8) missing the second byte of K element 3 of row
/// (0, 0), and the first byte of V element 5 of row (1, 2).
fn damaged(b: &KvBlock) -> (PartialBlock, usize, usize) {
    let kb = at(b, 0, 0, 3) + 1;
    let vb = b.k.len() + at(b, 1, 2, 5);
    let total = b.k.len() + b.v.len();
    let mut p = PartialBlock::complete(b);
    p.present = vec![0..kb, kb + 1..vb, vb + 1..total];
    p.k[kb] = 0;
    p.v[vb - b.k.len()] = 0;
    (p, kb, vb)
}

fn partial(blocks: &[KvBlock]) -> Vec<PartialBlock> {
    blocks.iter().map(PartialBlock::complete).collect()
}

#[test]
fn zero_fill_keeps_only_elements_with_both_bytes() {
    let lm = tiny();
    let blocks = hand_built(&lm.model);
    let (damaged0, kb, vb) = damaged(&blocks[0]);
    let mut parts = partial(&blocks);
    parts[0] = damaged0;
    let kv = rebuild(
        lm.model.config(),
        &Device::Cpu,
        N,
        &parts,
        MissingRows::ZeroFill,
    )
    .unwrap();
    assert!(!kv.has_mask());
    let got = bytes_of(&kv);
    // Expected: the complete rebuild with exactly those two elements zeroed.
    let full = rebuild(
        lm.model.config(),
        &Device::Cpu,
        N,
        &partial(&blocks),
        MissingRows::ZeroFill,
    )
    .unwrap();
    let mut want = bytes_of(&full);
    // Layer 0's block 0 spans tokens 0..8 of a 20-token block in `want`.
    let b = &blocks[0];
    let k_el = at(b, 0, 0, 3);
    let v_el = at(b, 1, 2, 5);
    assert_eq!((kb & !1, (vb - b.k.len()) & !1), (k_el, v_el));
    let map = |h: usize, t: usize, e: usize| ((h * N + t) * b.head_dim + e) * 2;
    want[0].k[map(0, 0, 3)..map(0, 0, 3) + 2].fill(0);
    want[0].v[map(1, 2, 5)..map(1, 2, 5) + 2].fill(0);
    assert_ne!(
        want[0].k,
        bytes_of(&full)[0].k,
        "the element was not zero already"
    );
    assert_eq!(got, want);
}

#[test]
fn mask_drops_rows_with_any_missing_byte() {
    let lm = tiny();
    let cfg = lm.model.config().clone();
    let blocks = hand_built(&lm.model);
    let (damaged0, _, _) = damaged(&blocks[0]);
    let mut parts = partial(&blocks);
    parts[0] = damaged0;
    // And a whole lost block: layer 1, tokens 16..20.
    let last = parts.len() - 1;
    parts[last] = PartialBlock::lost(&blocks[last]);
    let kv = rebuild(&cfg, &Device::Cpu, N, &parts, MissingRows::Mask).unwrap();
    assert!(kv.has_mask());
    let missing: Vec<(usize, usize, usize)> = (0..cfg.n_layers)
        .flat_map(|l| (0..cfg.n_kv_heads).flat_map(move |h| (0..N).map(move |t| (l, h, t))))
        .filter(|&(l, h, t)| {
            let bias = kv.layers[l].bias.as_ref().map(|b| {
                b.narrow(2, t, 1)
                    .unwrap()
                    .narrow(0, h, 1)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()[0]
            });
            bias.is_some_and(|x| x == f32::NEG_INFINITY)
        })
        .collect();
    let mut want = vec![(0, 0, 0), (0, 1, 2)];
    want.extend((0..cfg.n_kv_heads).flat_map(|h| (16..N).map(move |t| (1, h, t))));
    want.sort();
    assert_eq!(missing, want);
    // Rows that arrived whole keep their bytes.
    let full =
        bytes_of(&rebuild(&cfg, &Device::Cpu, N, &partial(&blocks), MissingRows::Mask).unwrap());
    let got = bytes_of(&kv);
    let row = cfg.head_dim * 2;
    let off = (N + 1) * row; // row (h = 1, t = 1) of layer 0
    assert_eq!(got[0].k[off..off + row], full[0].k[off..off + row]);
}

#[test]
fn bad_partial_blocks_are_errors() {
    let lm = tiny();
    let blocks = hand_built(&lm.model);
    // Each broken copy of block 0 is a KvTransfer error in `mode`.
    let refused = |broken: &dyn Fn(&mut PartialBlock), mode: MissingRows| {
        let mut p = PartialBlock::complete(&blocks[0]);
        broken(&mut p);
        let e = rebuild(lm.model.config(), &Device::Cpu, N, &[p], mode);
        assert!(matches!(e, Err(GpuError::KvTransfer(_))));
    };
    refused(&|p| p.k.truncate(p.k.len() - 1), MissingRows::ZeroFill);
    refused(
        &|p| p.present = std::iter::once(0..p.k.len() * 3).collect(),
        MissingRows::Mask,
    );
    // A token count whose byte size overflows, or a start past the end: errors.
    refused(&|p| p.len = usize::MAX / 2, MissingRows::Mask);
    refused(&|p| p.start = usize::MAX, MissingRows::ZeroFill);
}

#[test]
fn token_f1_is_multiset_overlap() {
    assert_eq!(token_f1(&[1, 2, 3], &[1, 2, 3]), 1.0);
    assert_eq!(token_f1(&[1, 2, 3], &[3, 2, 1]), 1.0);
    assert_eq!(token_f1(&[1, 2, 3], &[4, 5]), 0.0);
    assert_eq!(token_f1(&[], &[]), 1.0);
    assert_eq!(token_f1(&[1], &[]), 0.0);
    // Repeats count once per occurrence: common = 1, p = 1/2, r = 1/2.
    assert!((token_f1(&[1, 2], &[1, 1]) - 0.5).abs() < 1e-12);
}

#[test]
fn full_cache_scores_one_and_wrong_reference_scores_zero() {
    let lm = tiny();
    let blocks = hand_built(&lm.model);
    let full = partial(&blocks);
    let lost: Vec<PartialBlock> = blocks.iter().map(PartialBlock::lost).collect();
    let mut prompt = context();
    prompt.extend([5, 6]);
    let vocab = lm.model.config().vocab_size as u32;
    let mut ev = QualityEvaluator::new(lm.model, 8, 16);
    let case = |blocks, mode| HandoffCase {
        arrived: None,
        n_tokens: N,
        blocks,
        mode,
        prompt: &prompt,
    };
    let reference = ev
        .continuations(&[case(&full, MissingRows::ZeroFill)])
        .unwrap()
        .remove(0);
    assert_eq!(reference.len(), 8);
    let cases = [
        case(&full, MissingRows::ZeroFill),
        case(&full, MissingRows::Mask),
        case(&lost, MissingRows::ZeroFill),
        case(&lost, MissingRows::Mask),
    ];
    let refs = vec![reference.clone(); cases.len()];
    let q = ev.evaluate(&cases, &refs).unwrap();
    for qi in &q[..2] {
        assert_eq!((qi.f1, qi.top1), (1.0, 1.0));
        assert_eq!(qi.tokens, reference);
    }
    for qi in &q {
        assert!((0.0..=1.0).contains(&qi.f1) && (0.0..=1.0).contains(&qi.top1));
    }
    // A reference the model never predicts: every forced position disagrees.
    let wrong: Vec<u32> = reference.iter().map(|t| (t + 1) % vocab).collect();
    let top1 = ev.teacher_forced_top1(&cases[..1], &[wrong]).unwrap();
    assert!(top1[0] < 1.0);
}

/// Partial blocks losing, block by block, nothing / everything / half of the
/// bytes, by a fixed pattern.
fn damaged_pattern(blocks: &[KvBlock], salt: usize) -> Vec<PartialBlock> {
    blocks
        .iter()
        .enumerate()
        .map(|(i, b)| match (i + salt) % 3 {
            0 => PartialBlock::complete(b),
            1 => PartialBlock::lost(b),
            _ => {
                let mut p = PartialBlock::complete(b);
                let total = b.k.len() + b.v.len();
                p.present = vec![0..total / 3, total / 2..total];
                p
            }
        })
        .collect()
}

#[test]
fn shared_evaluation_equals_stepwise_bit_for_bit() {
    let lm = tiny();
    let blocks = hand_built(&lm.model);
    let full = partial(&blocks);
    let parts: Vec<Vec<PartialBlock>> = (0..3).map(|s| damaged_pattern(&blocks, s)).collect();
    let lost: Vec<PartialBlock> = blocks.iter().map(PartialBlock::lost).collect();
    // Damage from layer 1 on: the fast path's teacher forcing joins the
    // recorded full-cache pass at layer 1 (and the full cache's at the end).
    let late: Vec<PartialBlock> = damaged_pattern(&blocks, 1)
        .into_iter()
        .zip(&full)
        .map(|(d, f)| if d.layer == 0 { f.clone() } else { d })
        .collect();
    let mut prompt = context();
    prompt.extend([5, 6, 7]);
    let vocab = lm.model.config().vocab_size as u32;
    for decode_len in [1, 6, 10] {
        let mut fast = QualityEvaluator::new(tiny().model, decode_len, 16);
        let mut slow = QualityEvaluator::new(tiny().model, decode_len, 16);
        for mode in [MissingRows::ZeroFill, MissingRows::Mask] {
            let case = |blocks| HandoffCase {
                arrived: None,
                n_tokens: N,
                blocks,
                mode,
                prompt: &prompt,
            };
            let reference = slow.continuations(&[case(&full)]).unwrap().remove(0);
            // The fast path rebuilds on the full cache as a base.
            fast.set_base(Some(&case(&full))).unwrap();
            let mut cases = vec![case(&full), case(&lost), case(&late)];
            cases.extend(parts.iter().map(|p| case(p)));
            // References: the true one, and ones shorter, longer, empty and
            // never predicted, so every divergence position is exercised.
            let long: Vec<u32> = reference
                .iter()
                .chain(&[9, 4, 2])
                .copied()
                .collect::<Vec<_>>();
            let wrong: Vec<u32> = reference.iter().map(|t| (t + 1) % vocab).collect();
            let variants = [
                reference.clone(),
                reference[..reference.len() / 2].to_vec(),
                long,
                vec![],
                wrong,
            ];
            for r in &variants {
                let refs = vec![r.clone(); cases.len()];
                let a = fast.evaluate(&cases, &refs).unwrap();
                let b = slow.evaluate_stepwise(&cases, &refs).unwrap();
                assert_eq!(a, b, "decode_len {decode_len}, {mode:?}, reference {r:?}");
                let t = fast.teacher_forced_top1(&cases, &refs).unwrap();
                assert_eq!(t, b.iter().map(|q| q.top1).collect::<Vec<_>>());
            }
            let q = fast
                .evaluate(&cases[..1], std::slice::from_ref(&reference))
                .unwrap();
            assert_eq!((q[0].f1, q[0].top1), (1.0, 1.0));
        }
        // The shared path decodes fewer free-running tokens and skips layers.
        assert!(fast.stats().free_tokens < slow.stats().free_tokens || decode_len == 1);
        assert!(fast.stats().joined_layer_rows_skipped > 0);
    }
}
