# Twin of bench/attention_cuda.c: causal scaled_dot_product_attention forward + backward at (8,12,1024,64) on
# the GPU, in TFLOP/s (7 B H T^2 D FLOPs a step; the forward alone: 2 B H T^2 D). Prints nothing without a GPU.
import torch
import torch.nn.functional as F

from common import best_of, report, selected

if torch.cuda.is_available():
    B, H, T, D = 8, 12, 1024, 64
    for name, dt, fwd_only in (("attention_cuda_bf16", torch.bfloat16, False),
                               ("attention_cuda_bf16_fwd", torch.bfloat16, True),
                               ("attention_cuda_f32", torch.float32, False)):
        if not selected(name):
            continue
        q, k, v, go = (torch.randn(B, H, T, D, device="cuda", dtype=dt, requires_grad=i < 3) for i in range(4))

        def step():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if not fwd_only:
                o.backward(go)
            torch.cuda.synchronize()

        step()
        flops = (2.0 if fwd_only else 7.0) * B * H * T * T * D
        report(name, flops / best_of(step, 3, 10, 0.5) * 1e-12, "TFLOP/s", True)
