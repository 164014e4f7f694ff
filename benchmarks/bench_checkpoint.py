"""save_state / load_state of a ~100M-parameter model with AdamW against plain torch.save /
torch.load of the same state, in the same run, beside the disk's own write speed.

    python benchmarks/bench_checkpoint.py [--directory DIR] [--repeats 5] [--memory warm|cold]
                                          [--preemption-only] [--preemption-steps 50]

Targets: the committed save_state (every file written, checksummed and fsynced, the
directory renamed into place) in at most 0.5x the time of torch.save + fsync of the same
state; the training time blocked by save_state(blocking=False) (the state copied to host
memory; writing, hashing, syncing and the commit run beside training) at most 0.15x the
blocking save_state; load_state (checksums verified, every state checked before it is copied) in at most
0.8x the time of torch.load, both from a cold page cache and a hot one. save_state returns
once every file is written; its commit (fsync, manifest, rename) overlaps training, and
the "committed" row is the time until the checkpoint is synced and in place. safetensors
(save_file / load_file of the same tensors, flattened) is shown beside them.

Resume rows (``--resume-only`` runs them alone): the time from ``load_state`` to the first
batch of a loader stopped at sample 1,000,000 of an epoch, for a shuffled map-style dataset
and for an iterable dataset that keeps its own position (and a ``datasets`` streaming dataset
when the package is installed), beside the time a plain torch ``DataLoader`` takes to get
there by reading (what skipping its seen batches costs). Target: under 1 s.

The preemption row: the training step of 2 processes (DDP, gloo) with
``ProjectConfiguration(save_on_preemption=True)`` and no signal, against the same step
without it and against plain torch (``DistributedDataParallel`` and a ``DataLoader``); target
at most 1.01x the step without it. The check's own time per step is timed apart as well: on a
busy machine the steps of two passes differ by more than it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import json
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from safetensors.torch import load_file, save_file
from torch.utils.data import DataLoader, Dataset, IterableDataset

from drivetrain import Accelerator


def build(parameters: int) -> torch.nn.Module:
    width = 2048
    layers = max(parameters // (width * width), 1)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])


def disk_write_speed(directory: str, size: int = 512 * 2**20) -> float:
    """MB/s of writing ``size`` bytes and fsyncing them."""
    block = os.urandom(8 * 2**20)
    path = os.path.join(directory, "disk-speed.bin")
    start = time.perf_counter()
    with open(path, "wb") as handle:
        for _ in range(size // len(block)):
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
    elapsed = time.perf_counter() - start
    os.remove(path)
    return size / elapsed / 1e6


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def drop_page_cache_hint(path: str) -> None:
    """Ask the kernel to forget cached pages of a checkpoint, so loads read the disk alike."""
    for root, _dirs, files in os.walk(path) if os.path.isdir(path) else [(os.path.dirname(path), [], [os.path.basename(path)])]:
        for name in files:
            try:
                descriptor = os.open(os.path.join(root, name), os.O_RDONLY)
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(descriptor)
            except (OSError, AttributeError):
                pass


def settle(directory: str, state_bytes: int, memory: str) -> None:
    """Start every timed save and load from the same memory state, whichever method goes first.

    Writing a file fills page-cache pages. On a virtual machine that returns free memory to
    its host (free page reporting), the first write into such a page faults to the host,
    which can cost more than the copy itself; recently freed pages do not. Left alone, the
    method that happens to run right after memory was freed wins. ``warm`` recycles twice the
    state's size through the page cache first, so both find resident free pages, as on bare
    metal; ``cold`` waits until free memory has gone back to the host, so both pay the faults.
    """
    os.sync()
    if memory == "cold":
        time.sleep(4)
        return
    block = b"\0" * (64 * 2**20)
    path = os.path.join(directory, "settle.bin")
    with open(path, "wb") as handle:
        for _ in range(2 * state_bytes // len(block) + 1):
            handle.write(block)
    os.remove(path)  # unsynced pages are dropped: freed now, no disk I/O


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory", default=None)
    parser.add_argument("--parameters", type=int, default=100_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory", choices=("warm", "cold"), default="warm",
                        help="free memory resident before each timed step (warm), or returned to the host (cold)")
    parser.add_argument("--resume-only", action="store_true", help="only the rows of resuming deep into an epoch")
    parser.add_argument("--preemption-only", action="store_true", help="only the save_on_preemption step row")
    parser.add_argument("--preemption-steps", type=int, default=50)
    args = parser.parse_args()
    if args.preemption_only:
        print(preemption_row(args.preemption_steps, args.repeats))
        return
    directory = args.directory or tempfile.mkdtemp(prefix="drivetrain-bench-")
    os.makedirs(directory, exist_ok=True)
    if args.resume_only:
        print_resume_rows(directory)
        return

    accelerator = Accelerator()
    model = build(args.parameters)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.randn(4, 2048)).sum().backward()
    optimizer.step()  # creates the AdamW moments
    optimizer.zero_grad()
    params = sum(p.numel() for p in model.parameters())
    state_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values()) + sum(
        v.numel() * v.element_size() for s in optimizer.state_dict()["state"].values() for v in s.values()
        if isinstance(v, torch.Tensor))

    plain_path = os.path.join(directory, "plain.pt")
    ours_path = os.path.join(directory, "checkpoint")
    safe_path = os.path.join(directory, "plain.safetensors")
    samples: dict[str, list[float]] = {"torch.save": [], "torch.save+fsync": [], "safetensors+fsync": [],
                                       "save_state": [], "committed": [], "blocking=False": [],
                                       "async committed": [], "torch.load": [], "safetensors": [],
                                       "load_state": [], "torch.load hot": [], "load_state hot": []}

    def plain_save(fsync: bool = False):
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, plain_path)
        if fsync:
            descriptor = os.open(plain_path, os.O_RDONLY)
            os.fsync(descriptor)
            os.close(descriptor)

    def flat() -> dict[str, torch.Tensor]:
        tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
        for index, state in optimizer.state_dict()["state"].items():
            tensors.update({f"optimizer.{index}.{k}": v for k, v in state.items() if isinstance(v, torch.Tensor)})
        return tensors

    def safe_save():
        save_file(flat(), safe_path)
        descriptor = os.open(safe_path, os.O_RDONLY)
        os.fsync(descriptor)
        os.close(descriptor)

    def plain_load():
        state = torch.load(plain_path, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    def ours_save():
        # save_state returns once the files are written; the commit (fsync, manifest, rename)
        # overlaps training. "committed" is the time until the checkpoint is on disk and in place.
        samples["save_state"].append(timed(lambda: accelerator.save_state(ours_path)))
        samples["committed"].append(samples["save_state"][-1] + timed(accelerator.wait_for_everyone))

    def ours_save_nonblocking():
        # What training waits for: the copy of the state to host memory; the rest runs beside it.
        samples["blocking=False"].append(timed(lambda: accelerator.save_state(ours_path + "-async", blocking=False)))
        samples["async committed"].append(samples["blocking=False"][-1] + timed(accelerator.wait_for_checkpoint))
        shutil.rmtree(ours_path + "-async")

    def ours_load():
        accelerator.load_state(ours_path)

    saves = {"plain": lambda: samples["torch.save"].append(timed(plain_save)),
             "plain+fsync": lambda: samples["torch.save+fsync"].append(timed(lambda: plain_save(True))),
             "safe": lambda: samples["safetensors+fsync"].append(timed(safe_save)), "ours": ours_save,
             "ours async": ours_save_nonblocking}
    loads = {"plain": ("torch.load", plain_load), "safe": ("safetensors", lambda: load_file(safe_path)),
             "ours": ("load_state", ours_load)}
    for repeat in range(args.repeats):
        # Alternate which goes first. Each save starts with no dirty pages pending (os.sync)
        # and writes a fresh file (torch.save) or a fresh directory that replaces the previous
        # checkpoint (save_state, as in training).
        order = list(saves) if repeat % 2 == 0 else list(reversed(saves))
        for name in order:
            path = {"plain": plain_path, "plain+fsync": plain_path, "safe": safe_path}.get(name)
            if path is not None and os.path.exists(path):
                os.remove(path)
            settle(directory, state_bytes, args.memory)
            saves[name]()
        for name in (list(loads) if repeat % 2 == 0 else list(reversed(loads))):
            os.sync()
            for path in (plain_path, safe_path, ours_path):
                drop_page_cache_hint(path)
            settle(directory, state_bytes, args.memory)
            label, load = loads[name]
            samples[label].append(timed(load))
        for name in ("plain", "ours") if repeat % 2 == 0 else ("ours", "plain"):  # hot: the files were just read
            label, load = loads[name]
            load()
            samples[f"{label} hot"].append(timed(load))
    disk = disk_write_speed(directory)
    megabytes = state_bytes / 1e6
    fsync = os.environ.get("DRIVETRAIN_CHECKPOINT_FSYNC", "1").lower() not in ("0", "false", "no", "off")
    print(f"state: {params / 1e6:.1f}M parameters + AdamW = {megabytes:.0f} MB; checksums on (xxh3_128); disk write speed (fsync): "
          f"{disk:.0f} MB/s; save_state fsync {'on' if fsync else 'off'}; {args.memory} memory; "
          f"{args.repeats} repeats, medians")
    print(f"{'':18} {'seconds':>8} {'MB/s':>8} {'ratio':>7}  {'vs':17} each repeat (s)")
    baseline = {"torch.save": "torch.save", "torch.save+fsync": "torch.save+fsync",
                "safetensors+fsync": "torch.save+fsync", "save_state": "torch.save",
                "committed": "torch.save+fsync", "blocking=False": "save_state",
                "async committed": "save_state", "torch.load": "torch.load", "safetensors": "torch.load",
                "load_state": "torch.load", "torch.load hot": "torch.load hot", "load_state hot": "torch.load hot"}
    for name, times in samples.items():
        median = statistics.median(times)
        ratio = median / statistics.median(samples[baseline[name]])
        each = " ".join(f"{t:.2f}" for t in times)
        print(f"{name:18} {median:>8.2f} {megabytes / median:>8.0f} {ratio:>7.2f}  {baseline[name]:17} {each}")
    paired = [ours / plain for ours, plain in zip(samples["committed"], samples["torch.save+fsync"])]
    cold = [ours / plain for ours, plain in zip(samples["load_state"], samples["torch.load"])]
    blocked = [ours / blocking for ours, blocking in zip(samples["blocking=False"], samples["save_state"])]
    print(f"per-repeat ratios: committed/torch.save+fsync {' '.join(f'{r:.2f}' for r in paired)} (target <= 0.5); "
          f"load_state/torch.load {' '.join(f'{r:.2f}' for r in cold)} (target <= 0.8); "
          f"blocked by save_state(blocking=False)/save_state {' '.join(f'{r:.2f}' for r in blocked)} (target <= 0.15)")
    print_resume_rows(directory)
    if args.directory is None:
        shutil.rmtree(directory, ignore_errors=True)
    print(preemption_row(args.preemption_steps, args.repeats))


# ------------------------------------------------------------------ save_on_preemption's step cost

PREEMPTION_WIDTH, PREEMPTION_BATCH = 512, 32


def preemption_row(steps: int, repeats: int) -> str:
    """The step of 2 processes with save_on_preemption and no signal, against the step without
    it and plain torch: one ``drivetrain launch`` of :func:`preemption_worker`."""
    command = [sys.executable, "-m", "drivetrain", "launch", "--cpu", "--num-processes", "2", __file__,
               "--preemption-worker", str(steps), str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return f"save_on_preemption step: the workers failed ({done.returncode}): {done.stderr.strip()[-500:]}"
    result = json.loads(lines[-1])
    check = statistics.median(result.pop("check"))
    medians = {name: statistics.median(times) for name, times in result.items()}
    paired = [on / off for on, off in zip(result["on"], result["off"])]
    return (f"step, 2 processes (DDP, gloo), MLP {PREEMPTION_WIDTH}x{2 * PREEMPTION_WIDTH}, batch {PREEMPTION_BATCH}, "
            f"{steps} steps x {repeats}, medians: plain torch {medians['plain'] * 1e3:.2f} ms, drivetrain "
            f"{medians['off'] * 1e3:.2f} ms, with save_on_preemption (no signal) {medians['on'] * 1e3:.2f} ms; "
            f"with/without {medians['on'] / medians['off']:.3f}x (target <= 1.01; per repeat "
            f"{' '.join(f'{r:.3f}' for r in paired)}), with/plain torch {medians['on'] / medians['plain']:.3f}x; "
            f"the check's own cost {check * 1e6:.0f} us a step = {1 + check / medians['off']:.4f}x the step without it")


def preemption_worker(steps: int, repeats: int) -> None:
    """In each of 2 launched processes: time passes of ``steps`` training steps, plain torch,
    drivetrain, and drivetrain with save_on_preemption (its check on and off in turn, in the
    same processes, so that both see the same machine); rank 0 prints the seconds per step."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from drivetrain.services import preemption
    from drivetrain.utils import ProjectConfiguration

    def network() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(PREEMPTION_WIDTH, 2 * PREEMPTION_WIDTH), torch.nn.ReLU(),
                                   torch.nn.Linear(2 * PREEMPTION_WIDTH, 2 * PREEMPTION_WIDTH), torch.nn.ReLU(),
                                   torch.nn.Linear(2 * PREEMPTION_WIDTH, 1))

    with tempfile.TemporaryDirectory(prefix="drivetrain-bench-") as directory:
        accelerator = Accelerator(project_config=ProjectConfiguration(
            project_dir=directory, automatic_checkpoint_naming=True, save_on_preemption=True))
        world = accelerator.num_processes
        dataset = TensorDataset(torch.randn(steps * PREEMPTION_BATCH * world, PREEMPTION_WIDTH),
                                torch.randn(steps * PREEMPTION_BATCH * world, 1))
        plain_model = torch.nn.parallel.DistributedDataParallel(network())
        plain_optimizer = torch.optim.AdamW(plain_model.parameters(), lr=1e-4)
        plain_loader = DataLoader(dataset, batch_size=PREEMPTION_BATCH, sampler=DistributedSampler(dataset, shuffle=False))
        model = network()
        model, optimizer, loader = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4),
                                                       DataLoader(dataset, batch_size=PREEMPTION_BATCH))
        watch = accelerator._preemption  # switched off and on between passes: the same run, both ways
        check_seconds: list[float] = []
        check = watch.at_step_boundary

        def timed_check() -> None:  # the check's own cost, which the machine's noise cannot hide
            start = time.perf_counter()
            check()
            check_seconds.append(time.perf_counter() - start)

        watch.at_step_boundary = timed_check

        def plain_pass() -> None:
            for x, y in plain_loader:
                torch.nn.functional.mse_loss(plain_model(x), y).backward()
                plain_optimizer.step()
                plain_optimizer.zero_grad()

        def drivetrain_pass(check: bool) -> None:
            preemption._armed = accelerator._preemption = watch if check else None
            for x, y in loader:
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()

        passes = {"plain": plain_pass, "off": lambda: drivetrain_pass(False), "on": lambda: drivetrain_pass(True)}
        for name in passes:  # warm-up
            passes[name]()
        samples: dict[str, list[float]] = {name: [] for name in passes}
        for repeat in range(repeats):
            order = list(passes)[repeat % 3:] + list(passes)[:repeat % 3]
            for name in order:
                dist.barrier()
                start = time.perf_counter()
                passes[name]()
                dist.barrier()
                samples[name].append((time.perf_counter() - start) / steps)
        if accelerator.is_main_process:
            print(json.dumps({**samples, "check": check_seconds}), flush=True)


# ------------------------------------------------------------ resuming deep into an epoch

RESUME_AT, RESUME_BATCH = 1_000_000, 32


class Numbers(Dataset):
    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        return index


class PositionedStream(IterableDataset):
    """An iterable dataset that keeps its own position (state_dict / load_state_dict)."""

    def __init__(self, length: int) -> None:
        self.length, self.position, self.resume_at = length, 0, 0

    def __iter__(self):
        start, self.resume_at = self.resume_at, 0
        for index in range(start, self.length):
            self.position = index + 1
            yield index

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.resume_at = self.position = state["position"]


def _ids(batch) -> torch.Tensor:
    return torch.as_tensor(batch["x"] if isinstance(batch, dict) else batch)


def resume_time(make_loader, directory: str) -> tuple[float, float]:
    """(seconds from load_state to the first batch, seconds a plain DataLoader reads to get
    there): a prepared loader is played to sample RESUME_AT, saved, and resumed in the same
    process (its iterator dropped, as a restarted run has none)."""
    seen = RESUME_AT // RESUME_BATCH
    plain = iter(make_loader())
    start = time.perf_counter()
    for _ in range(seen):
        next(plain)
    replay = time.perf_counter() - start
    del plain

    accelerator = Accelerator()
    loader = accelerator.prepare(make_loader())
    iterator = iter(loader)
    for _ in range(seen):
        next(iterator)
    path = os.path.join(directory, "resume-checkpoint")
    accelerator.save_state(path)
    expected = next(iterator)
    del iterator
    start = time.perf_counter()
    accelerator.load_state(path)
    first = next(iter(loader))
    resume = time.perf_counter() - start
    assert torch.equal(_ids(first), _ids(expected)), "the resumed loader did not continue where it stopped"
    shutil.rmtree(path, ignore_errors=True)
    accelerator.end_training()
    return resume, replay


def print_resume_rows(directory: str) -> None:
    """Resume time at sample RESUME_AT of a map-style and of a stateful iterable dataset."""
    length = RESUME_AT + 100 * RESUME_BATCH
    cases = {"map-style, shuffled": lambda: DataLoader(Numbers(length), batch_size=RESUME_BATCH, shuffle=True),
             "iterable with state": lambda: DataLoader(PositionedStream(length), batch_size=RESUME_BATCH)}
    try:
        import datasets

        table = datasets.Dataset.from_dict({"x": list(range(length))})
        cases["datasets streaming"] = lambda: DataLoader(table.to_iterable_dataset(num_shards=8),
                                                         batch_size=RESUME_BATCH)
    except ImportError:
        pass
    print(f"resume at sample {RESUME_AT:,} (batch {RESUME_BATCH}): load_state to the first batch, target < 1 s")
    print(f"{'':22} {'seconds':>8} {'replay':>8} {'ratio':>7}  (replay: a plain DataLoader reading to the position)")
    for name, make_loader in cases.items():
        resume, replay = resume_time(make_loader, directory)
        print(f"{name:22} {resume:>8.3f} {replay:>8.2f} {resume / replay:>7.3f}  "
              f"{'under target' if resume < 1 else 'OVER TARGET'}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--preemption-worker"]:
        preemption_worker(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
