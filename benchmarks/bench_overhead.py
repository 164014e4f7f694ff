"""drivetrain's own cost against plain PyTorch, every case in one run: start-up, ``plugins list``,
the training step (fp32 and bf16 autocast, 1 and 2 processes) and small collectives.

    python benchmarks/bench_overhead.py                 # every row, about five minutes on 2 cores
    python benchmarks/bench_overhead.py --only startup --samples 5

Each row is measured side by side with its plain-PyTorch counterpart in the same run, in
ABBA order (plain, drivetrain, drivetrain, plain, ...) so that drift hits both alike, over
several samples. The times printed are each side's median; the ratio is the median of the
per-round ratios (the two samples of a round are taken back to back, so a drift of the
machine cancels in each). Both wall time and CPU time (user + system, of the process or of
the children) are given: on a machine shared with other work, wall time wanders with the
load, CPU time much less, so the CPU ratio is the check and the wall ratio the goal on an
idle machine. One line per row: medians of each side, the ratios (wall / CPU), the middle
half of the rounds' CPU ratios and the goal. A median over the goal whose lower quartile is
under it reads "within noise"; "OVER" means that most rounds are over.

- start-up: ``import drivetrain; drivetrain.Accelerator()`` against ``import torch`` plus
  what torch itself needs for a CPU run (a fresh interpreter each, bytecode cached first),
  in the installed environment (the goal's) and in this one. Two whole starts differ by 10%
  or more on a shared machine (see the middle half of each row's rounds), so each is followed
  by drivetrain's own cost, timed inside processes that have imported torch, as a share of
  torch's start: that row, which shows a cost of 2 or 3% where the ratio of whole starts
  cannot, is the goal's check;
- ``drivetrain plugins list``: absolute time of ``python -m drivetrain plugins list``, in an
  install of this tree from its wheel, as a user has it (the goal's row), and in this
  environment. An editable install makes every interpreter start import setuptools' path
  finder and what it needs (about 35 ms on a 2-core machine, before any line of drivetrain);
  the regular install sees the same libraries, so the same plugins are available;
- step: the small MLP of ``bench_training_step.py``, AdamW, one process (no process group,
  as plain torch runs it) and two (gloo, DDP on the plain side), fp32 and bf16 autocast
  (plain: the forward under ``torch.autocast``, the output cast back to fp32, as
  ``Accelerator(mixed_precision="bf16")`` does). The two sides train side by side in the
  same processes, their steps interleaved one by one, a fresh pair of models per sample;
- step with ``MonitorKwargs`` (fp32, 1 and 2 processes): the same loops, each side drawing its
  batches from a data loader (plain: torch's ``DataLoader``; drivetrain: the prepared one, which
  the monitor times), first with the monitor off (what the prepared loader itself costs), then
  with ``MonitorKwargs()`` at its defaults (every step timed, the loss read for the spike
  guard, a window logged every 50 steps). The monitor's own cost is the difference of the two;
- reduce / gather / broadcast of 1 KB and 1 MB on two processes (gloo), against the raw
  ``torch.distributed`` calls of ``bench_collectives.py``, the two sides' calls taken in
  turns, one by one;
- the same collectives' own cost: both sides called with the communication taken out
  (``bench_collectives.communication_removed``), so what is left is the Python, the copies
  and the allocations around the collective, given as a share of the raw call's time. On two
  processes sharing two cores a 1 KB collective's time varies by 10% or more from one block
  of calls to the next (identical calls included), so this row is the one that shows a cost
  of a few percent; the rows above show that nothing larger hides in the communication.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
PLAIN_STARTUP = "import torch; torch.device('cpu'); torch.get_num_threads()"
OURS_STARTUP = "import drivetrain; drivetrain.Accelerator()"
# drivetrain's part of a start, in a process that has done PLAIN_STARTUP (see startup_own_cost_rows)
OWN_STARTUP = f"""
import gc, json, time
{PLAIN_STARTUP}
start = time.perf_counter()
gc.collect()
collection = time.perf_counter() - start
wall, cpu = time.perf_counter(), time.process_time()
{OURS_STARTUP}
print(json.dumps({{"added": [time.perf_counter() - wall, time.process_time() - cpu], "collection": collection}}))
"""
SIZES = (("1 KB", 1 << 10), ("1 MB", 1 << 20))
GOALS = {"startup": 1.03, "plugins list": 0.15, "step": 1.02, "collective": 1.05, "monitor": 1.02}


def child_env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # torch's bytecode is compiled at install time; without this drivetrain's would be
    # compiled anew in every child and the start-up row would time the compiler
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_child(argv: list[str]) -> tuple[float, float, str]:
    """(wall, CPU of the child, its stdout) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=child_env(), capture_output=True, text=True, cwd=HERE)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def abba(plain: Callable[[], tuple[float, float]], ours: Callable[[], tuple[float, float]],
         samples: int) -> dict[str, list[tuple[float, float]]]:
    plain(), ours()  # warm-up: bytecode, page cache
    results: dict[str, list[tuple[float, float]]] = {"plain": [], "ours": []}
    for index in range(samples):
        order = (("plain", plain), ("ours", ours)) if index % 2 == 0 else (("ours", ours), ("plain", plain))
        for name, function in order:
            results[name].append(function())
    return results


def medians(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def paired_ratios(result: dict[str, list[tuple[float, float]]]) -> tuple[float, float]:
    """(wall, CPU) ratio ours / plain: the median of the ratios of the samples taken back to back.

    Both sides of a round run within a second of each other, so the machine's slow drifts
    (another job, the frequency) cancel in each round's ratio; the ratio of the two medians
    would keep them.
    """
    pairs = list(zip(result["plain"], result["ours"]))
    return (statistics.median(ours[0] / plain[0] for plain, ours in pairs),
            statistics.median(ours[1] / plain[1] for plain, ours in pairs))


def summary(result: dict[str, list[tuple[float, float]]]) -> dict[str, tuple[float, float]]:
    cpu_ratios = [ours[1] / plain[1] for plain, ours in zip(result["plain"], result["ours"])]
    quartiles = statistics.quantiles(cpu_ratios, n=4) if len(cpu_ratios) > 1 else cpu_ratios * 3
    return {"plain": medians(result["plain"]), "ours": medians(result["ours"]), "ratio": paired_ratios(result),
            "quartiles": (quartiles[0], quartiles[2])}


def row(label: str, plain: tuple[float, float], ours: tuple[float, float], goal: float, unit: float = 1e3,
        suffix: str = "ms", ratio: tuple[float, float] | None = None,
        quartiles: tuple[float, float] | None = None) -> str:
    """One row. With ``quartiles`` (of the per-round CPU ratios) the row also prints the middle
    half of its rounds, and a median over the goal whose lower quartile is under it reads
    "within noise": not shown to be over, not shown to be under."""
    wall_ratio, cpu_ratio = ratio if ratio is not None else (ours[0] / plain[0], ours[1] / plain[1])
    verdict = "ok" if cpu_ratio <= goal else "within noise" if quartiles and quartiles[0] <= goal else "OVER"
    middle = f"   rounds {quartiles[0]:.2f}-{quartiles[1]:.2f}" if quartiles else ""
    return (f"{label:<34} torch {plain[0] * unit:9.3f} / {plain[1] * unit:9.3f} {suffix}   drivetrain "
            f"{ours[0] * unit:9.3f} / {ours[1] * unit:9.3f} {suffix}   ratio {wall_ratio:5.2f} / {cpu_ratio:5.2f}"
            f"{middle}   goal <= {goal:.2f} (CPU {verdict})")


def own_cost_row(label: str, plain: float, ours: float, whole: float, goal: float, unit: str) -> str:
    """What drivetrain adds per call (``ours - plain``, seconds), as a share of the plain
    ``whole`` call it is part of."""
    added = (ours - plain) / whole
    verdict = "ok" if 1 + added <= goal else "OVER"
    return (f"{label:<34} torch {plain * 1e6:9.3f} us   drivetrain {ours * 1e6:9.3f} us   added "
            f"{(ours - plain) * 1e6:7.2f} us = {added:+.2%} of a {whole * 1e6:.0f} us {unit}{'':>6}goal <= {goal:.2f} "
            f"(CPU {verdict})")


def startup_rows(samples: int) -> list[str]:
    def command(python: str, code: str) -> Callable[[], tuple[float, float]]:
        return lambda: run_child([python, "-c", code])[:2]

    lines = []
    with tempfile.TemporaryDirectory(prefix="drivetrain-bench-") as directory:
        pythons = (("installed", regular_install(Path(directory))), ("editable install", sys.executable))
        for where, python in pythons:
            result = summary(abba(command(python, PLAIN_STARTUP), command(python, OURS_STARTUP), samples))
            whole = row(f"import + Accelerator(), {where}", result["plain"], result["ours"], GOALS["startup"],
                        ratio=result["ratio"], quartiles=result["quartiles"])
            lines.append(f"{whole.partition('   goal')[0]}   too wide for the goal: checked below")
            lines.extend(startup_own_cost_rows(python, where, result["plain"], samples,
                                               goal=python != sys.executable))
        for where, python in pythons:
            wall, cpu = medians([run_child([python, "-m", "drivetrain", "plugins", "list"])[:2]
                                 for _ in range(samples)])
            if python == sys.executable:
                goal = "(this environment: no goal)"
            else:
                goal = f"goal <= {GOALS['plugins list']:.2f} s (CPU {'ok' if cpu <= GOALS['plugins list'] else 'OVER'})"
            lines.append(f"{'plugins list, ' + where:<34} {wall:.3f} s wall / {cpu:.3f} s CPU (absolute){'':>44}{goal}")
    return lines


def startup_own_cost_rows(python: str, where: str, plain: tuple[float, float], samples: int,
                          goal: bool) -> list[str]:
    """What ``import drivetrain; Accelerator()`` adds to a start, timed inside processes that
    have imported torch, as a share of plain torch's whole start (``plain``: wall, CPU).

    A whole start varies by 10% or more from one process to the next on a shared machine
    (torch's import reads and maps a few hundred MB), so the ratio of two whole starts cannot
    show a cost of 2 or 3%; timed in-process, the added part varies by a few ms. The full
    garbage collection that torch's import leaves due is run first and timed apart: whichever
    code allocates next pays it, in a plain torch program as much as here.
    """
    added, collection = [], []
    for _ in range(samples):
        stdout = run_child([python, "-c", OWN_STARTUP])[2]
        result = json.loads(stdout.strip().splitlines()[-1])
        added.append(tuple(result["added"]))
        collection.append(result["collection"])
    wall, cpu = medians(added)
    share = (wall / plain[0], cpu / plain[1])
    verdict = "ok" if 1 + share[1] <= GOALS["startup"] else "OVER"
    check = f"goal <= {GOALS['startup']:.2f} (CPU {verdict})" if goal else "(this environment: no goal)"
    return [f"{'  own cost, ' + where:<34} added {wall * 1e3:6.1f} / {cpu * 1e3:6.1f} ms = {share[0]:+.2%} / "
            f"{share[1]:+.2%} of torch's start   ratio {1 + share[0]:5.2f} / {1 + share[1]:5.2f}   {check}",
            f"{'  (not counted: the collection':<34} torch's import leaves due, {statistics.median(collection) * 1e3:.0f} ms "
            f"in either program)"]


def regular_install(directory: Path) -> str:
    """The Python of a fresh environment holding drivetrain installed from a wheel of this
    tree, that also sees this environment's libraries (a path file: their own path files,
    the editable install's finder among them, are not run)."""
    wheels, venv = directory / "wheels", directory / "venv"
    quiet = {"check": True, "capture_output": True}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(HERE.parent), "-w", str(wheels)], **quiet)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], **quiet)
    python = str(venv / "bin" / "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index",
                    *map(str, wheels.glob("drivetrain-*.whl"))], **quiet)
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             text=True, **quiet).stdout.strip()
    Path(purelib, "libraries-of-the-benchmarked-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([python, "-m", "compileall", "-q", purelib], env=child_env(), **quiet)
    return python


def launched(processes: int, worker: str, options: list[str]) -> list[dict]:
    """Run ``--worker`` on ``processes`` processes; the JSON lines rank 0 printed."""
    script = [str(HERE / "bench_overhead.py"), "--worker", worker, *options]
    if processes == 1:
        argv = [sys.executable, *script]
    else:
        argv = [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", str(processes), *script]
    return [json.loads(line) for line in run_child(argv)[2].splitlines() if line.startswith("{")]


def step_rows(samples: int, steps: int) -> list[str]:
    lines = []
    for processes in (1, 2):
        for precision in ("fp32", "bf16"):
            (result,) = launched(processes, "step", ["--precision", precision, "--samples", str(samples),
                                                     "--steps", str(steps)])
            label = f"step, small MLP, {precision}, {processes} process{'es' if processes > 1 else ''}"
            lines.append(row(label, tuple(result["plain"]), tuple(result["ours"]), GOALS["step"],
                             ratio=tuple(result["ratio"]), quartiles=tuple(result["quartiles"])))
            if "own" in result:
                lines.append(own_cost_row(f"step, {precision}, own cost", *result["own"], GOALS["step"], "step"))
    return lines


def monitor_rows(samples: int, steps: int) -> list[str]:
    """The step with batches from data loaders, with ``MonitorKwargs`` off and on (fp32)."""
    lines = []
    for processes in (1, 2):
        for monitor in (False, True):
            options = ["--precision", "fp32", "--samples", str(samples), "--steps", str(steps), "--loader"]
            (result,) = launched(processes, "step", options + (["--monitor"] if monitor else []))
            label = (f"step, loaders, {processes} proc{'s' if processes > 1 else ''}, "
                     f"{'MonitorKwargs on' if monitor else 'monitor off'}")
            lines.append(row(label, tuple(result["plain"]), tuple(result["ours"]),
                             GOALS["monitor" if monitor else "step"], ratio=tuple(result["ratio"]),
                             quartiles=tuple(result["quartiles"])))
    return lines


def collective_rows(samples: int) -> list[str]:
    results = launched(2, "collectives", ["--samples", str(samples)])
    lines = []
    for r in results:
        if "own" in r:  # the cost per call of the Python around the collective, communication taken out
            lines.append(own_cost_row(f"{r['name']} {r['size']}, own cost", *r["own"], GOALS["collective"], "call"))
        else:
            lines.append(row(f"{r['name']} {r['size']}, 2 processes", tuple(r["plain"]), tuple(r["ours"]),
                             GOALS["collective"], unit=1e6, suffix="us", ratio=tuple(r["ratio"]),
                             quartiles=tuple(r["quartiles"])))
    return lines


# ------------------------------------------------------------------ workers (in the launched processes)

def interleaved(plain: Callable[[int], object], ours: Callable[[int], object], count: int
                ) -> dict[str, tuple[float, float]]:
    """Each side's (wall, CPU of this process) per call over ``count`` calls of each (given
    the call's index), taken in turns and alternating which goes first: a drift of the
    machine, which moves a block of identical calls by several percent, moves both alike."""
    sides = {"plain": plain, "ours": ours}
    spent = {name: [0.0, 0.0] for name in sides}
    for index in range(count):
        for name in ("plain", "ours") if index % 2 == 0 else ("ours", "plain"):
            wall, cpu = time.perf_counter(), time.process_time()
            sides[name](index)
            spent[name][0] += time.perf_counter() - wall
            spent[name][1] += time.process_time() - cpu
    return {name: (wall / count, cpu / count) for name, (wall, cpu) in spent.items()}


def step_worker(precision: str, samples: int, steps: int, loader: bool = False, monitor: bool = False) -> None:
    """With ``loader`` each side draws its batches from a data loader (torch's; the prepared
    one), with ``monitor`` under ``MonitorKwargs()``."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from bench_training_step import batches, build
    from drivetrain import Accelerator, MonitorKwargs

    torch.set_num_threads(1)
    accelerator = Accelerator(mixed_precision="bf16" if precision == "bf16" else "no",
                              kwargs_handlers=[MonitorKwargs()] if monitor else None)
    distributed = accelerator.num_processes > 1

    def plain_step(model, optimizer, x, y) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    def our_step(model, optimizer, x, y) -> None:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()

    def compare(build_model: Callable[[], torch.nn.Module], data: list) -> dict:
        """A plain model and a prepared one trained side by side (:func:`interleaved`), a
        fresh pair per sample; the first pair warms up."""
        results: dict[str, list[tuple[float, float]]] = {"plain": [], "ours": []}
        for sample in range(samples + 1):
            plain_model = build_model()
            plain_model = DistributedDataParallel(plain_model) if distributed else plain_model
            our_model = build_model()
            our_model, our_optimizer = accelerator.prepare(our_model,
                                                           torch.optim.AdamW(our_model.parameters(), lr=1e-3))
            sides = {"plain": (plain_model, torch.optim.AdamW(plain_model.parameters(), lr=1e-3), plain_step),
                     "ours": (our_model, our_optimizer, our_step)}
            for x, y in data[:5]:  # warm-up, not timed
                for model, optimizer, step in sides.values():
                    step(model, optimizer, x, y)
            if distributed:
                dist.barrier()
            def taking(name: str) -> Callable[[int], None]:
                model, optimizer, step = sides[name]
                if loader:
                    drawn = iter(loaders[name])
                    return lambda index: step(model, optimizer, *next(drawn))
                return lambda index: step(model, optimizer, *data[index])

            if loader:
                loaders = data_loaders(data)

            spent = interleaved(taking("plain"), taking("ours"), len(data))
            accelerator.free_memory()
            if sample:
                for name, pair in spent.items():
                    results[name].append(pair)
        best = {side: min(pairs, key=lambda pair: pair[1]) for side, pairs in results.items()}
        return {**summary(results), "best": best}

    def data_loaders(data: list) -> dict:
        """torch's loader over this process's batches, and a prepared one whose share of the
        whole data set is as many batches of the same size."""
        x, y = torch.cat([b[0] for b in data]), torch.cat([b[1] for b in data])
        size = data[0][0].shape[0]
        whole = torch.utils.data.TensorDataset(x.repeat(accelerator.num_processes, 1),
                                               y.repeat(accelerator.num_processes, 1))
        return {"plain": torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=size),
                "ours": accelerator.prepare(torch.utils.data.DataLoader(whole, batch_size=size))}

    result = compare(lambda: build("small"), batches("small", steps, 32, accelerator.process_index))
    if not distributed and not loader:
        # The same loops on a one-weight model, whose step is nearly all Python and dispatch:
        # the difference of the best blocks is what drivetrain adds to every step, in
        # microseconds, free of the small model's noise (blocks of identical steps vary by
        # several percent here).
        generator = torch.Generator().manual_seed(0)
        tiny_data = [(torch.randn(1, 1, generator=generator), torch.randn(1, 1, generator=generator))
                     for _ in range(steps * 4)]
        tiny = compare(lambda: torch.nn.Sequential(torch.nn.Linear(1, 1)), tiny_data)
        result["own"] = [tiny["best"]["plain"][1], tiny["best"]["ours"][1], result["plain"][1]]
    if accelerator.is_main_process:
        print(json.dumps({key: value for key, value in result.items() if key != "best"}))
    accelerator.wait_for_everyone()


def collective_pairs(tensor) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    """(name, drivetrain's call, the raw torch.distributed calls it stands for) on ``tensor``."""
    from bench_collectives import raw_broadcast, raw_gather, raw_reduce
    from drivetrain.utils import broadcast, gather, reduce

    return [("reduce(sum)", lambda: reduce(tensor, "sum"), lambda: raw_reduce(tensor)),
            ("gather", lambda: gather(tensor), lambda: raw_gather(tensor)),
            ("broadcast", lambda: broadcast(tensor), lambda: raw_broadcast(tensor))]


def collectives_worker(samples: int) -> None:
    """Each collective against torch's, then the same 1 KB calls with the communication taken
    out: what is left is each side's own cost per call, which no scheduling noise drowns."""
    import torch

    from bench_collectives import communication_removed, own_cost
    from drivetrain.state import PartialState

    state = PartialState()
    torch.set_num_threads(1)
    call_cost: dict[tuple[str, str], float] = {}  # each raw call's CPU time: what its own cost is measured against
    for label, size in SIZES:
        tensor = torch.randn(size // 4 // 16, 16)
        calls = 500 if size < (1 << 20) else 100
        for name, ours, raw in collective_pairs(tensor):
            # the two sides' calls in turns, one by one, in samples of ``calls`` each (the first warms up)
            results: dict[str, list[tuple[float, float]]] = {"plain": [], "ours": []}
            for sample in range(samples * 2 + 1):
                state.wait_for_everyone()
                spent = interleaved(lambda index: raw(), lambda index: ours(), calls)
                if sample:
                    for side, pair in spent.items():
                        results[side].append(pair)
            result = summary(results)
            if state.is_main_process:
                print(json.dumps({"name": name, "size": label, **result}), flush=True)
            call_cost[name, label] = result["plain"][1]
    own = []
    with communication_removed():  # copies and allocations stay, so a copy too many shows at 1 MB
        for label, size in SIZES:
            calls = 20_000 if size < (1 << 20) else 400
            for name, ours, raw in collective_pairs(torch.randn(size // 4 // 16, 16)):
                own.append((name, label, own_cost(raw, calls, rounds=5), own_cost(ours, calls, rounds=5)))
    if state.is_main_process:
        for name, label, raw_cost, our_cost in own:
            print(json.dumps({"name": name, "size": label, "own": [raw_cost, our_cost, call_cost[name, label]]}),
                  flush=True)
    state.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("startup", "step", "monitor", "collectives"), action="append",
                        help="run only these rows (repeatable); default: all")
    parser.add_argument("--samples", type=int, default=8, help="ABBA samples per side (default 8)")
    parser.add_argument("--steps", type=int, default=150, help="timed steps per step sample (default 150)")
    parser.add_argument("--worker", choices=("step", "collectives"), help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    parser.add_argument("--loader", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--monitor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.worker == "step":
        return step_worker(args.precision, args.samples, args.steps, args.loader, args.monitor)
    if args.worker == "collectives":
        return collectives_worker(args.samples)
    print(f"drivetrain against plain torch: medians of {args.samples} ABBA samples; wall / CPU; "
          f"the CPU ratio is the check on a loaded machine, the wall ratio on an idle one", flush=True)
    wanted = args.only or ["startup", "step", "monitor", "collectives"]
    for name, rows in (("startup", lambda: startup_rows(args.samples)),
                       ("step", lambda: step_rows(args.samples, args.steps)),
                       ("monitor", lambda: monitor_rows(args.samples, args.steps)),
                       ("collectives", lambda: collective_rows(args.samples))):
        if name in wanted:
            for line in rows():
                print(line, flush=True)


if __name__ == "__main__":
    main()
