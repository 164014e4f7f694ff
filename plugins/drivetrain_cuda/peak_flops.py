"""Dense peak FLOP/s of common NVIDIA GPUs, from NVIDIA's data sheets (without sparsity), for
MFU (``MonitorKwargs``). A GPU not listed has no known peak: the user gives ``peak_flops``."""

from __future__ import annotations

# (a piece of torch.cuda.get_device_name(), {precision: FLOP/s}); the first match wins, so a
# variant ("H100 PCIe") comes before its family ("H100", which is the SXM part).
PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    ("B200", {"bf16": 2250e12, "fp16": 2250e12, "fp8": 4500e12, "tf32": 1100e12, "no": 80e12}),
    ("H200 NVL", {"bf16": 835.5e12, "fp16": 835.5e12, "fp8": 1671e12, "tf32": 417.5e12, "no": 60e12}),
    ("H200", {"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12, "no": 66.9e12}),
    ("H100 NVL", {"bf16": 835.5e12, "fp16": 835.5e12, "fp8": 1671e12, "tf32": 417.5e12, "no": 60e12}),
    ("H100 PCIe", {"bf16": 756e12, "fp16": 756e12, "fp8": 1513e12, "tf32": 378e12, "no": 51.2e12}),
    ("H100", {"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12, "no": 66.9e12}),
    ("A100", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "no": 19.5e12}),
    ("L40S", {"bf16": 362.05e12, "fp16": 362.05e12, "fp8": 733e12, "tf32": 183e12, "no": 91.6e12}),
    ("L4", {"bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12, "tf32": 60e12, "no": 30.3e12}),
    ("A10G", {}),  # its clocks differ by cloud; give peak_flops
    ("A10", {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12, "no": 31.2e12}),
    ("V100", {"fp16": 125e12, "no": 15.7e12}),
    ("T4", {"fp16": 65e12, "no": 8.1e12}),
)


def peak_flops(device_name: str, precision: str) -> float | None:
    """The peak of the first listed GPU whose name piece is in ``device_name``, in ``precision``
    (``"no"``: fp32, ``"tf32"``, ``"bf16"``, ``"fp16"``, ``"fp8"``); ``None`` when either is unknown."""
    for piece, peaks in PEAKS:
        if piece in device_name:
            return peaks.get(precision)
    return None
