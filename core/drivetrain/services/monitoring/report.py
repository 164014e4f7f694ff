"""What the step monitor logs: the names (documented once, in the monitoring guide), one
window's figures, the progress bar's line and the summary at the end of training."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

#: Every name the monitor logs through ``accelerator.log``, with what it is.
METRICS = {
    "perf/step_time_s": "seconds per optimizer step (wall time of the window / its steps)",
    "perf/data_wait_s": "seconds per step spent waiting for a prepared data loader's next batch",
    "perf/forward_backward_s": "seconds per step left for the script's own work: forward, loss, backward",
    "perf/optimizer_s": "seconds per step inside the prepared optimizers' step()",
    "perf/collectives_s": "seconds per step inside the collectives drivetrain issues (outside the parts above)",
    "perf/samples_per_s": "samples per second, all processes",
    "perf/tokens_per_s": "tokens per second, all processes (batches with attention_mask or input_ids)",
    "perf/model_flops_per_step": "FLOPs of one step's forward and backward on one process, counted on the first step",
    "perf/model_flops_per_s": "model FLOPs per second of one process",
    "perf/mfu": "model FLOPs utilisation: model FLOPs per second / the device's peak",
    "memory/peak_bytes": "the most bytes this process has held on its device (the CPU: peak resident set)",
    "loss/spikes": "steps with a loss spike so far (under skip and stop: on any process)",
}


@dataclass
class Window:
    """The sums over some steps (the first step aside: it counts FLOPs and warms up)."""

    steps: int = 0
    wall: float = 0.0
    data: float = 0.0
    optimizer: float = 0.0
    collectives: float = 0.0
    samples: int = 0
    counted_samples: bool = False
    tokens: Any = 0  # a number, or a tensor on the device until logged
    counted_tokens: bool = False

    def add(self, other: "Window") -> None:
        self.steps += other.steps
        self.wall += other.wall
        self.data += other.data
        self.optimizer += other.optimizer
        self.collectives += other.collectives
        self.samples += other.samples
        self.counted_samples |= other.counted_samples
        self.tokens = self.tokens + other.tokens
        self.counted_tokens |= other.counted_tokens


def figures(window: Window, data_parallel: int, flops: int | None, peak: float | None,
            peak_memory: int | None, spikes: int) -> dict[str, float]:
    """The logged figures of ``window`` (names of :data:`METRICS`)."""
    steps = max(window.steps, 1)
    step_time = window.wall / steps
    parts = {"perf/data_wait_s": window.data / steps, "perf/optimizer_s": window.optimizer / steps,
             "perf/collectives_s": window.collectives / steps}
    values = {"perf/step_time_s": step_time, **parts,
              "perf/forward_backward_s": max(step_time - sum(parts.values()), 0.0), "loss/spikes": float(spikes)}
    if window.wall > 0:
        if window.counted_samples:
            values["perf/samples_per_s"] = window.samples * data_parallel / window.wall
        if window.counted_tokens:
            tokens = int(window.tokens) if isinstance(window.tokens, torch.Tensor) else window.tokens
            values["perf/tokens_per_s"] = tokens * data_parallel / window.wall
        if flops is not None:
            values["perf/model_flops_per_step"] = float(flops)
            values["perf/model_flops_per_s"] = flops / step_time
            if peak:
                values["perf/mfu"] = flops / step_time / peak
    if peak_memory is not None:
        values["memory/peak_bytes"] = float(peak_memory)
    return values


def bar_postfix(values: dict[str, float]) -> dict[str, str]:
    """The few figures a progress bar shows."""
    shown = {"step": f"{values['perf/step_time_s']:.3g}s"}
    if "perf/samples_per_s" in values:
        shown["samples/s"] = f"{values['perf/samples_per_s']:.4g}"
    if "perf/tokens_per_s" in values:
        shown["tokens/s"] = f"{values['perf/tokens_per_s']:.4g}"
    if "perf/mfu" in values:
        shown["MFU"] = f"{values['perf/mfu']:.1%}"
    return shown


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "-"


def summary_text(values: dict[str, float], steps: int, first_step: float | None, spike_steps: list[int],
                 action: str | None) -> str:
    """One paragraph: the whole run's figures (from :func:`figures` of all its windows)."""
    step = values["perf/step_time_s"]
    lines = [f"step monitor: {steps + (1 if first_step is not None else 0)} optimizer steps; "
             f"{step:.4g} s per step after the first"
             + (f" (the first, with the FLOP count: {first_step:.4g} s)" if first_step is not None else ""),
             f"  where it goes: data wait {_share(values['perf/data_wait_s'], step)}, forward+backward "
             f"{_share(values['perf/forward_backward_s'], step)}, "
             f"optimizer {_share(values['perf/optimizer_s'], step)}, "
             f"collectives {_share(values['perf/collectives_s'], step)}"]
    rates = []
    if "perf/samples_per_s" in values:
        rates.append(f"{values['perf/samples_per_s']:.5g} samples/s")
    if "perf/tokens_per_s" in values:
        rates.append(f"{values['perf/tokens_per_s']:.5g} tokens/s")
    if "perf/model_flops_per_step" in values:
        rates.append(f"{values['perf/model_flops_per_step']:.4g} model FLOPs per step per process")
    if "perf/mfu" in values:
        rates.append(f"MFU {values['perf/mfu']:.1%}")
    if rates:
        lines.append("  throughput: " + ", ".join(rates))
    if "memory/peak_bytes" in values:
        lines.append(f"  peak memory: {values['memory/peak_bytes'] / 2**30:.3f} GiB")
    if action is not None:
        at = ", ".join(map(str, spike_steps[:10])) + (", ..." if len(spike_steps) > 10 else "")
        where = f" (steps {at}; on_spike={action!r})" if spike_steps else ""
        lines.append(f"  loss spikes: {len(spike_steps)}{where}")
    return "\n".join(lines)
