"""The same transformers Trainer job on Hugging Face Accelerate 1.15.0 and on drivetrain through
its `accelerate` alias: per-step losses side by side and the largest relative difference.

    python benchmarks/bench_accelerate_parity.py [--strategies ddp fsdp2] [--steps 6]

Two virtual environments are made (once) under ``--envs`` (default ``.venvs-parity/``), both
layered over the interpreter running this script, so torch, transformers and datasets are the
very same files and only ``accelerate`` differs:

- ``accelerate``: ``pip install --no-deps accelerate==1.15.0`` (Hugging Face Accelerate);
- ``alias``: ``pip install --no-deps ./compat/accelerate`` (drivetrain).

Each job runs `accelerate launch --multi_gpu --num_processes 2` of
``tests/clients/scripts/trainer_job.py`` (a tiny random Llama, a local dataset, seed 0, the
Trainer's ``use_cpu=True``): on a machine without GPUs both start 2 CPU processes (gloo).
Accelerate's ``--cpu`` would start one process whatever ``--num_processes`` says. Goal: a relative difference within 1e-5 at every
step for DDP and FSDP2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from alias_env import AliasEnv, make_alias_env, real_accelerate_env  # noqa: E402

JOB = ROOT / "tests" / "clients" / "scripts" / "trainer_job.py"
STRATEGIES = {"ddp": [], "fsdp2": ["--fsdp"], "ddp-accumulation": ["--accumulation", "2"]}
GOAL = 1e-5


def environments(root: Path) -> dict[str, AliasEnv]:
    envs = {}
    envs["accelerate"] = real_accelerate_env(root / "accelerate")
    alias = root / "alias"
    envs["drivetrain"] = AliasEnv(alias) if (alias / "bin" / "accelerate").exists() else make_alias_env(alias)
    return envs


def run(env: AliasEnv, options: list[str], steps: int, output: Path) -> list[float]:
    command = [str(env.bin / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", str(JOB),
               "--output-dir", str(output), "--max-steps", str(steps), *options]
    result = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-4000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    if result["world_size"] != 2:
        raise SystemExit(f"{' '.join(command)} ran {result['world_size']} process(es), not 2")
    return result["losses"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategies", nargs="+", default=["ddp", "fsdp2"], choices=sorted(STRATEGIES))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--envs", type=Path, default=ROOT / ".venvs-parity")
    args = parser.parse_args()

    envs = environments(args.envs)
    worst_all = 0.0
    for strategy in args.strategies:
        losses = {name: run(env, STRATEGIES[strategy], args.steps, args.envs / "out" / name / strategy)
                  for name, env in envs.items()}
        print(f"\n{strategy}: loss per step, accelerate 1.15.0 vs drivetrain (through the alias)")
        print(f"{'step':>4}  {'accelerate':>14}  {'drivetrain':>14}  {'rel. diff':>10}")
        worst = 0.0
        for step, (theirs, ours) in enumerate(zip(losses["accelerate"], losses["drivetrain"]), start=1):
            relative = abs(theirs - ours) / max(abs(theirs), 1e-12)
            worst = max(worst, relative)
            print(f"{step:>4}  {theirs:>14.8f}  {ours:>14.8f}  {relative:>10.2e}")
        if len(losses["accelerate"]) != len(losses["drivetrain"]):
            print(f"different numbers of steps: {len(losses['accelerate'])} vs {len(losses['drivetrain'])}")
            worst = float("inf")
        print(f"largest relative difference: {worst:.2e} ({'within' if worst <= GOAL else 'above'} the goal {GOAL:g})")
        worst_all = max(worst_all, worst)
    sys.exit(0 if worst_all <= GOAL else 1)


if __name__ == "__main__":
    main()
