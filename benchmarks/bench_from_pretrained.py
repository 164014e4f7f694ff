"""Disk-offloaded generation through transformers' ``from_pretrained(device_map="auto")``:
Hugging Face Accelerate 1.15.0 against drivetrain's ``accelerate`` alias, same script.

    python benchmarks/bench_from_pretrained.py [--rounds 2] [--cpu-budget 150MB] [--envs .venvs-parity]

A Llama of about 170M parameters (12 layers, fp32, random weights from a local config) is
saved once with ``save_pretrained``. Each case then runs in a fresh process of its own
virtual environment (both layered over this interpreter, so torch and transformers are the
very same files and only ``accelerate`` differs; see ``benchmarks/bench_accelerate_parity.py``):

- ``accelerate``: ``from_pretrained(device_map="auto", max_memory={"cpu": BUDGET},
  offload_folder=...)`` on Accelerate 1.15.0: most layers are read from disk at each forward;
- ``drivetrain``: the same call on the alias;
- ``in RAM``: drivetrain's alias loading the whole model into memory (``device_map="cpu"``),
  the limit offloading can approach.

Each prints the load time, greedy ``generate()`` tokens per second (16 new tokens after one
untimed warm-up token), the peak RSS of generation (``VmHWM``, started over after loading),
the peak while loading, and the tokens. Cases run in turns,
``--rounds`` times, and the median of each is reported with the ratios the goals name:
tokens/s >= 1.5x Accelerate's and >= 0.7x in RAM, peak RSS <= Accelerate's, identical tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from alias_env import AliasEnv, make_alias_env, real_accelerate_env  # noqa: E402
from common import status_mb  # noqa: E402

NEW_TOKENS = 16
PROMPT = [[1, 306, 4658, 278, 6593, 310, 2834, 338, 29871, 29946, 29906, 29889]]


def _peak_rss_mb() -> float:
    return status_mb("VmHWM")


def _reset_peak_rss() -> None:
    """Start this process's peak RSS over from its current RSS (Linux: ``clear_refs`` 5)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def _case(model_dir: Path, mode: str, budget_text: str) -> dict:
    """One measured case, in this fresh process (run by the environment being measured)."""
    budget: int | str = int(budget_text) if budget_text.isdigit() else budget_text
    import torch
    from transformers import AutoModelForCausalLM

    import accelerate

    torch.manual_seed(0)
    imported_mb = status_mb("VmRSS")
    with tempfile.TemporaryDirectory() as offload:
        start = time.perf_counter()
        if mode == "offload":
            model = AutoModelForCausalLM.from_pretrained(model_dir, device_map="auto", max_memory={"cpu": budget},
                                                         offload_folder=offload)
        else:
            model = AutoModelForCausalLM.from_pretrained(model_dir, device_map="cpu")
        load_s = time.perf_counter() - start
        loaded_mb = status_mb("VmRSS")
        load_peak_mb = _peak_rss_mb()
        _reset_peak_rss()  # from here VmHWM is the peak of generation alone
        placement = sorted({str(d) for d in (getattr(model, "hf_device_map", None) or {"": "cpu"}).values()})
        ids = torch.tensor(PROMPT)
        with torch.no_grad():
            model.generate(ids, max_new_tokens=1, do_sample=False)  # warm-up: first-call costs apart
            start = time.perf_counter()
            out = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
            elapsed = time.perf_counter() - start
    return {"load_s": load_s, "tokens_per_s": NEW_TOKENS / elapsed, "peak_rss_mb": _peak_rss_mb(),
            "load_peak_rss_mb": load_peak_mb, "rss_after_imports_mb": imported_mb, "rss_after_load_mb": loaded_mb,
            "tokens": out[0, ids.shape[1]:].tolist(), "placement": placement,
            "accelerate": getattr(accelerate, "__version__", "?")}


def _save_model(directory: Path) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                         num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=512,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(directory, max_shard_size="200MB")
    return sum(p.numel() for p in model.parameters())


def _environments(root: Path) -> dict[str, AliasEnv]:
    alias = root / "alias"
    drivetrain = AliasEnv(alias) if (alias / "bin" / "accelerate").exists() else make_alias_env(alias)
    return {"accelerate": real_accelerate_env(root / "accelerate"), "drivetrain": drivetrain}


def _run(env: AliasEnv, model_dir: Path, mode: str, budget: str) -> dict:
    command = [str(env.python), __file__, "--case", mode, "--model", str(model_dir), "--cpu-budget", budget]
    result = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cpu-budget", default="150MB", help="max_memory['cpu'] for the offloaded cases")
    parser.add_argument("--envs", type=Path, default=ROOT / ".venvs-parity")
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print("RESULT " + json.dumps(_case(args.model, args.case, args.cpu_budget)))
        return

    envs = _environments(args.envs)
    cases = {"accelerate": (envs["accelerate"], "offload"), "drivetrain": (envs["drivetrain"], "offload"),
             "in RAM": (envs["drivetrain"], "ram")}
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = Path(scratch) / "llama"
        parameters = _save_model(model_dir)
        print(f"model: Llama, {parameters / 1e6:.0f}M parameters, fp32, 12 layers; cpu budget {args.cpu_budget}; "
              f"greedy generate({NEW_TOKENS} tokens); {args.rounds} round(s), cases in turns")
        results: dict[str, list[dict]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, (env, mode) in cases.items():
                results[name].append(_run(env, model_dir, mode, args.cpu_budget))

    print(f"{'case':<12}{'accelerate':>20}{'load s':>9}{'tokens/s':>10}{'peak RSS MB':>13}{'load peak':>11}"
          f"{'after imports':>15}{'after load':>12}  placement")
    medians = {}
    for name, runs in results.items():
        medians[name] = {key: statistics.median(run[key] for run in runs)
                         for key in ("load_s", "tokens_per_s", "peak_rss_mb", "load_peak_rss_mb",
                                     "rss_after_imports_mb", "rss_after_load_mb")}
        every = " / ".join(f"{run['tokens_per_s']:.2f}" for run in runs)
        print(f"{name:<12}{runs[0]['accelerate']:>20}{medians[name]['load_s']:>9.2f}"
              f"{medians[name]['tokens_per_s']:>10.2f}{medians[name]['peak_rss_mb']:>13.0f}"
              f"{medians[name]['load_peak_rss_mb']:>11.0f}"
              f"{medians[name]['rss_after_imports_mb']:>15.0f}{medians[name]['rss_after_load_mb']:>12.0f}  "
              f"{','.join(runs[0]['placement'])}  (tokens/s per round: {every})")
    ours, theirs, ram = medians["drivetrain"], medians["accelerate"], medians["in RAM"]
    same = len({json.dumps(run["tokens"]) for runs in results.values() for run in runs}) == 1
    speed, limit = ours["tokens_per_s"] / theirs["tokens_per_s"], ours["tokens_per_s"] / ram["tokens_per_s"]
    memory = ours["peak_rss_mb"] / theirs["peak_rss_mb"]
    print(f"tokens/s, drivetrain / Accelerate: {speed:.2f}x (goal >= 1.5x)  "
          f"{'met' if speed >= 1.5 else 'NOT MET'}")
    print(f"tokens/s, drivetrain offloaded / in RAM: {limit:.2f}x (goal >= 0.7x)  {'met' if limit >= 0.7 else 'NOT MET'}")
    print(f"peak RSS during generate(), drivetrain / Accelerate: {memory:.2f}x (goal <= 1.0x)  "
          f"{'met' if memory <= 1.0 else 'NOT MET'}")
    load_memory = ours["load_peak_rss_mb"] / theirs["load_peak_rss_mb"]
    print(f"peak RSS while loading (transformers' own code, mostly), drivetrain / Accelerate: {load_memory:.2f}x")
    print(f"load time, drivetrain / Accelerate: {ours['load_s'] / theirs['load_s']:.2f}x")
    print(f"tokens identical in every case and round: {same}")


if __name__ == "__main__":
    main()
