"""Checkpoints at URLs against local ones: what the object-storage layer costs, and what it
leaves local paths (nothing but a check of the path's form).

    python benchmarks/bench_checkpoint_remote.py [--parameters 10_000_000] [--repeats 3]

Rows (medians), each as a ratio to the local save_state / load_state of the same state:
save_state to file:// (staged, then copied: the layer's own cost without a network),
save_state / load_state through s3:// on moto's S3 server on localhost (needs
drivetrain[s3] and moto[server]; an in-memory Python server, so the ratio is an upper bound
of the layer's cost, not a network's speed), and the local path's added check per call
against a local save. Goal: local paths as fast as before (the check well under 0.001x of
a save).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import statistics
import tempfile
import time

import torch

from drivetrain import Accelerator, ProjectConfiguration
from drivetrain.checkpointing import remote


def build(parameters: int) -> torch.nn.Module:
    width = 1024
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(max(parameters // (width * width), 1))])


def timed(action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def s3_server():
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    import boto3

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                 region_name="us-east-1").create_bucket(Bucket="bench")
    return server, endpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parameters", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    work = tempfile.mkdtemp(prefix="bench-remote-")
    os.environ["DRIVETRAIN_CHECKPOINT_STAGING_DIR"] = os.path.join(work, "staging")
    server = None
    try:
        server, endpoint = s3_server()
        config = ProjectConfiguration(storage_options={"endpoint_url": endpoint})
        accelerator = Accelerator(project_config=config)
        model = build(args.parameters)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model, optimizer = accelerator.prepare(model, optimizer)
        model(torch.randn(2, 1024)).sum().backward()
        optimizer.step()
        size = sum(t.numel() * t.element_size() for t in model.state_dict().values()) * 3
        local = os.path.join(work, "local")
        rows = {
            "save_state local": timed(lambda: accelerator.save_state(local), args.repeats),
            "save_state file://": timed(lambda: accelerator.save_state(f"file://{work}/store"), args.repeats),
            "save_state s3:// (moto)": timed(lambda: accelerator.save_state("s3://bench/ckpt"), args.repeats),
            "load_state local": timed(lambda: accelerator.load_state(local), args.repeats),
        }
        shutil.rmtree(os.path.join(work, "staging", "downloads"), ignore_errors=True)
        rows["load_state s3:// (moto), first"] = timed(lambda: accelerator.load_state("s3://bench/ckpt"), 1)
        rows["load_state s3:// (moto), cached"] = timed(lambda: accelerator.load_state("s3://bench/ckpt"),
                                                         args.repeats)
        check = timed(lambda: (remote.plan_upload(accelerator, local), remote.fetch_for_load(accelerator, local)),
                      1000)
        print(f"state {size / 2**20:.0f} MB (model + AdamW), medians of {args.repeats}")
        for name, seconds in rows.items():
            base = rows["load_state local"] if name.startswith("load") else rows["save_state local"]
            print(f"  {name:34s} {seconds * 1000:9.1f} ms  {seconds / base:6.2f}x local")
        print(f"  {'local path check (per call)':34s} {check * 1e6:9.1f} us  "
              f"{check / rows['save_state local']:.6f}x local save")
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
