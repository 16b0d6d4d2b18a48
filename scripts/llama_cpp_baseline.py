#!/usr/bin/env python3
"""llama.cpp baseline for `edgemu bench decode` (through llama-cpp-python).

Called by the bench with the GGUF and the token ids it uses itself; prints one
JSON line: prefill tok/s of --prefill-ids, decode tok/s of the first
--decode-ids prompt alone, and aggregate decode tok/s of all --decode-ids
prompts (16) decoded together in one llama_batch per step (sequence ids 0..15,
each at its own position). Greedy (argmax of the logits).

Needs llama-cpp-python; on this VM build it with AMX off:
  CMAKE_ARGS="-DGGML_AMX=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
    pip install llama-cpp-python
"""

import argparse
import json
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--prefill-ids", required=True, help="comma-separated token ids")
    p.add_argument("--decode-ids", action="append", default=[],
                   help="comma-separated token ids of one prompt (repeat per sequence)")
    a = p.parse_args(argv)
    a.prefill_ids = [int(x) for x in a.prefill_ids.split(",") if x]
    a.decode_ids = [[int(x) for x in d.split(",") if x] for d in a.decode_ids]
    if not a.prefill_ids or not a.decode_ids:
        p.error("need --prefill-ids and at least one --decode-ids")
    return a


def main(argv):
    a = parse_args(argv)
    import llama_cpp
    import numpy as np  # a dependency of llama-cpp-python
    from llama_cpp import Llama

    n_seq = len(a.decode_ids)
    longest = max(len(d) for d in a.decode_ids) + a.steps + 2
    n_ctx = max(len(a.prefill_ids) + 8, longest * n_seq) + 64
    llm = Llama(model_path=a.model, n_ctx=n_ctx, n_batch=max(512, len(a.prefill_ids)),
                n_threads=a.threads, n_threads_batch=a.threads, n_seq_max=max(1, n_seq),
                logits_all=False, verbose=False)
    ctx = llm._ctx.ctx
    n_vocab = llm.n_vocab()

    def clear():
        llm.reset()
        mem = getattr(llama_cpp, "llama_get_memory", None)
        if mem is not None:
            llama_cpp.llama_memory_clear(mem(ctx), True)
        else:
            llama_cpp.llama_kv_cache_clear(ctx)

    batch = llama_cpp.llama_batch_init(max(512, len(a.prefill_ids), longest * n_seq), 0, max(1, n_seq))

    def decode(items):
        """items: (token, pos, seq, want_logits) → argmax per wanted row, in order."""
        batch.n_tokens = len(items)
        for i, (tok, pos, seq, want) in enumerate(items):
            batch.token[i] = tok
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = want
        rc = llama_cpp.llama_decode(ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        out = []
        for i, (_, _, _, want) in enumerate(items):
            if want:
                row = llama_cpp.llama_get_logits_ith(ctx, i)
                out.append(int(np.ctypeslib.as_array(row, shape=(n_vocab,)).argmax()))
        return out

    def prefill(prompts):
        items = []
        for s, p in enumerate(prompts):
            items += [(t, j, s, j == len(p) - 1) for j, t in enumerate(p)]
        return decode(items)

    def decode_rate(prompts):
        clear()
        nxt = prefill(prompts)
        pos = [len(p) for p in prompts]
        t0 = time.perf_counter()
        for _ in range(a.steps):
            nxt = decode([(nxt[s], pos[s], s, True) for s in range(len(prompts))])
            pos = [x + 1 for x in pos]
        return len(prompts) * a.steps / (time.perf_counter() - t0)

    decode_rate(a.decode_ids[:1])  # warm-up
    clear()
    t0 = time.perf_counter()
    prefill([a.prefill_ids])
    prefill_tok_s = len(a.prefill_ids) / (time.perf_counter() - t0)
    b1 = decode_rate(a.decode_ids[:1])
    b16 = decode_rate(a.decode_ids) if n_seq >= 16 else None
    print(json.dumps({"prefill_tok_s": prefill_tok_s, "decode_b1_tok_s": b1,
                      "decode_b16_tok_s": b16, "n_threads": a.threads,
                      "version": getattr(llama_cpp, "__version__", "?")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
