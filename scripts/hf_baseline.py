#!/usr/bin/env python3
"""Hugging Face transformers baseline for `edgemu bench decode`.

A `LlamaForCausalLM` with SmolLM2-135M's configuration and seeded random
weights (no download), greedy generation with the eager attention
implementation, at each batch size given: prefill tok/s (one forward pass over
the prompts) and decode tok/s (generated tokens after the first, over the
generation time minus that prefill). Prints one JSON object (and a table on
stderr).

    python3 scripts/hf_baseline.py --device cuda --batches 1,32
    python3 scripts/hf_baseline.py --print-config      # no torch needed

Used by scripts/h200-check.sh on the GPU machine, where torch and transformers
are installed. Tokens are random ids; `min_new_tokens` keeps every sequence
generating to the end.
"""

import argparse
import json
import sys
import time

SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_dim=64,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=2,
)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--batches", default="1,32", help="comma-separated batch sizes")
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--layers", type=int, default=None,
                   help="override the layer count (small CPU smoke runs)")
    p.add_argument("--repeats", type=int, default=2, help="timed runs per batch (best kept)")
    p.add_argument("--print-config", action="store_true",
                   help="print the model config as JSON and exit (no torch needed)")
    a = p.parse_args(argv)
    try:
        a.batches = [int(b) for b in a.batches.split(",") if b.strip()]
    except ValueError:
        p.error(f"--batches: expected comma-separated integers, got {a.batches!r}")
    if not a.batches or min(a.batches) < 1:
        p.error("--batches: need at least one batch size >= 1")
    if a.prompt_len < 1 or a.new_tokens < 2:
        p.error("--prompt-len must be >= 1 and --new-tokens >= 2")
    return a


def config_dict(a):
    c = dict(SMOLLM2_135M)
    if a.layers is not None:
        c["num_hidden_layers"] = a.layers
    return c


def main(argv):
    a = parse_args(argv)
    cfg = config_dict(a)
    if a.print_config:
        print(json.dumps({"config": cfg, "batches": a.batches, "device": a.device,
                          "dtype": a.dtype, "prompt_len": a.prompt_len,
                          "new_tokens": a.new_tokens}))
        return 0
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(a.seed)
    dtype = getattr(torch, a.dtype)
    config = LlamaConfig(**cfg, attn_implementation="eager")
    model = LlamaForCausalLM(config).to(device=a.device, dtype=dtype).eval()
    dev = torch.device(a.device)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    out = {"model": "LlamaForCausalLM SmolLM2-135M config, random weights",
           "transformers": transformers.__version__, "torch": torch.__version__,
           "device": a.device, "dtype": a.dtype, "attn": "eager",
           "prompt_len": a.prompt_len, "new_tokens": a.new_tokens,
           "layers": cfg["num_hidden_layers"], "prefill_tok_s": {}, "decode_tok_s": {}}
    if dev.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(dev)
    with torch.inference_mode():
        for b in a.batches:
            ids = torch.randint(3, cfg["vocab_size"], (b, a.prompt_len), generator=gen).to(dev)
            mask = torch.ones_like(ids)
            kw = dict(attention_mask=mask, do_sample=False, pad_token_id=2, use_cache=True)
            model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kw)  # warm-up
            best_pre, best_dec = 0.0, 0.0
            for _ in range(max(1, a.repeats)):
                sync(); t0 = time.perf_counter()
                model(ids, attention_mask=mask, use_cache=True)
                sync(); t_pre = time.perf_counter() - t0
                sync(); t0 = time.perf_counter()
                o = model.generate(ids, max_new_tokens=a.new_tokens,
                                   min_new_tokens=a.new_tokens, **kw)
                sync(); t_gen = time.perf_counter() - t0
                made = o.shape[1] - a.prompt_len
                dec_s = max(t_gen - t_pre, 1e-9)
                best_pre = max(best_pre, b * a.prompt_len / t_pre)
                best_dec = max(best_dec, b * (made - 1) / dec_s)
            out["prefill_tok_s"][str(b)] = best_pre
            out["decode_tok_s"][str(b)] = best_dec
            print(f"hf batch {b:>3}: prefill {best_pre:10.1f} tok/s   decode {best_dec:10.1f} tok/s aggregate",
                  file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
