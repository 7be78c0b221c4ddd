# Writes tests/data/ref.safetensors with the Python safetensors library
# (pip install safetensors); tests/io/test_safetensors.c checks its contents.
import os
import torch
from safetensors.torch import save_file

t = {
    "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5,
    "f64": torch.tensor([1.5, -2.25, 1e300], dtype=torch.float64),
    "i32": torch.tensor([-1, 2, 2147483647], dtype=torch.int32),
    "i64": torch.tensor([-(2**40), 7], dtype=torch.int64),
    "bool": torch.tensor([True, False, True]),
    "u8": torch.tensor([0, 255, 7], dtype=torch.uint8),
    "f16": torch.tensor([1.0, -0.5, 65504.0], dtype=torch.float16),
    "bf16": torch.tensor([1.0, -2.0, 0.15625], dtype=torch.bfloat16),
    "scalar": torch.tensor(3.25, dtype=torch.float32),
    "empty": torch.zeros(0, 4, dtype=torch.float32),
    "layer.0.weight": torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) - 12,
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref.safetensors")
save_file(t, out, metadata={"format": "pt", "step": "42"})
print(out, os.path.getsize(out))
