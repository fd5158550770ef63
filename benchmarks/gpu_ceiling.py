"""What a GPU forward costs once kernel launches are free: eager vs one CUDA graph replay, same shapes.

On a lent H200 the engine spent ~45 ms per forward of Gemma-3-270M (host-bound: ~2,000 kernels launched one by
one from Python). This times the model's decoder + LM head on B rows of one token each (no cache: the arithmetic
of a decode step without its attention over past keys), eagerly and as a captured CUDA graph replayed with the
same input buffers, so the gap says how much a graph-captured engine forward could save before building one.
On a CPU only the eager column is measured (there are no CUDA graphs), which keeps the script runnable anywhere.

    python benchmarks/gpu_ceiling.py MODEL [--dtype bfloat16] [--rows 1,16,64] [--steps 30]
"""

from __future__ import annotations

import argparse
import time

import torch


def timed(run, steps: int, device: torch.device) -> float:
    """Mean ms per call over ``steps`` calls after 3 warm-up calls, synchronised on a GPU."""
    for _ in range(3):
        run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) * 1000 / steps


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default=None)
    parser.add_argument("--rows", default="1,16,64")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).to(device).eval()
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    print(f"{args.model} on {device} ({args.dtype}); ms per forward of B rows x 1 token (decoder + LM head)")
    print(f"{'rows':>5} {'eager ms':>9} {'graph ms':>9} {'eager / graph':>14}")
    for rows in (int(r) for r in args.rows.split(",")):
        ids = torch.randint(100, 20000, (rows, 1), device=device)
        positions = torch.full((rows, 1), 40, device=device)

        def forward() -> torch.Tensor:
            hidden = decoder(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state
            return head(hidden[:, -1])

        eager = timed(forward, args.steps, device)
        graph_ms, note = None, ""
        if device.type == "cuda":
            try:
                stream = torch.cuda.Stream(device)
                stream.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(stream):  # warm-up outside the capture, as capture requires
                    for _ in range(3):
                        forward()
                torch.cuda.current_stream(device).wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out = forward()
                reference = forward()
                graph.replay()
                torch.cuda.synchronize(device)
                if not torch.allclose(out.float(), reference.float(), atol=1e-2, rtol=1e-2):
                    note = "  (replay differs from eager: not a valid capture)"
                graph_ms = timed(graph.replay, args.steps, device)
            except Exception as exc:  # noqa: BLE001 - report why capture failed, keep the eager figure
                note = f"  (capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]})"
        ratio = f"{eager / graph_ms:14.1f}" if graph_ms else f"{'-':>14}"
        graph_text = f"{graph_ms:9.2f}" if graph_ms else f"{'-':>9}"
        print(f"{rows:5d} {eager:9.2f} {graph_text} {ratio}{note}")


if __name__ == "__main__":
    main()
