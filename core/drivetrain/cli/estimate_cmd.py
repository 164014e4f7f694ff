"""``drivetrain estimate-memory``: how much memory a model needs, per dtype, without loading it.

The model is built on the meta device (nothing allocated, no weights downloaded) from a local
model folder or ``config.json`` (transformers), a timm model name, or ``module:Class``; its
sizes come from the same computation device maps use (``compute_module_sizes``). A name that
is none of those is looked up on the Hugging Face Hub (metadata only, :func:`verify_on_hub`) to
say whether it is gated or does not exist.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

from ..kernel.errors import ConfigError, GatedModelError, ModelNotFoundError
from .json_output import emit

DTYPES = ("float32", "float16", "bfloat16", "int8", "int4")
# Bytes per parameter relative to float32.
_SHRINK = {"float32": 1, "float16": 2, "bfloat16": 2, "int8": 4, "int4": 8}


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "estimate-memory", help="Estimate the memory a model needs to load and to train, per dtype",
        description="Build the model on the meta device (no download, no memory) and print its size per dtype.")
    parser.add_argument("model_name", help="a local model folder or config.json (transformers), a timm model name, "
                                           "or module:Class (built with no arguments)")
    parser.add_argument("--library_name", "--library-name", choices=("transformers", "timm"), default=None,
                        help="where the model comes from (default: guessed from model_name)")
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=["float32", "float16", "int8", "int4"],
                        help="dtypes to report (default: float32 float16 int8 int4)")
    parser.add_argument("--trust_remote_code", "--trust-remote-code", action="store_true",
                        help="allow a local model folder's own modeling code (transformers)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run_estimate)


#: What :func:`verify_on_hub` answers for a gated repository and for one that does not exist.
GATED, NO_REPO = "gated", "repo"


def verify_on_hub(repo: str, token: str | None = None) -> Any:
    """What the Hugging Face Hub says of model ``repo``: its ``ModelInfo``, ``"gated"``, ``"repo"``
    (no such repository), or ``None`` where the Hub cannot be asked (``huggingface_hub`` not
    installed, ``HF_HUB_OFFLINE=1``, no network). Only metadata is read."""
    try:
        from huggingface_hub import model_info
        from huggingface_hub.utils import GatedRepoError, HFValidationError, RepositoryNotFoundError
    except ImportError:
        return None
    try:
        return model_info(repo, token=token)
    except GatedRepoError:  # a subclass of RepositoryNotFoundError: first
        return GATED
    except (RepositoryNotFoundError, HFValidationError):
        return NO_REPO
    except OSError:  # offline mode, no network, the Hub unreachable
        return None


def _not_found(model_name: str, answer: Any, why: str) -> ModelNotFoundError:
    where = "nor a repository on the Hugging Face Hub" if answer == NO_REPO else "nor module:Class"
    return ModelNotFoundError(f"{model_name} is not a local model folder or file, {where}, {why}; give a local "
                              "folder with its config.json, a timm model name, or module:Class")


def build_empty_model(model_name: str, library_name: str | None = None, trust_remote_code: bool = False,
                      access_token: str | None = None, verify: Any = None) -> Any:
    """The model ``model_name`` names, on the meta device.

    A name that is not local and not ``module:Class`` is first checked with ``verify(model_name,
    access_token)`` (:func:`verify_on_hub` unless given): a gated repository raises
    :class:`~drivetrain.errors.GatedModelError`, a name found nowhere
    :class:`~drivetrain.errors.ModelNotFoundError` (both ``OSError``).
    """
    from ..services.big_model.dispatch import init_empty_weights

    path = Path(model_name)
    local = path.exists()
    answer = None
    if not local and not (":" in model_name and library_name is None):
        answer = (verify or verify_on_hub)(model_name, access_token)
        if answer == GATED:
            raise GatedModelError(f"{model_name} is gated on the Hugging Face Hub: accept its conditions on the "
                                  "model's page and log in (huggingface-cli login, or HF_TOKEN), then download its "
                                  "config.json and give that folder")
    if library_name is None:
        if ":" in model_name and not local:
            library_name = "class"
        elif local:
            library_name = "transformers"
        else:
            library_name = getattr(answer, "library_name", None) or "timm"
    with init_empty_weights():
        if library_name == "class":
            module_name, _, class_name = model_name.partition(":")
            try:
                cls = getattr(importlib.import_module(module_name), class_name)
            except (ImportError, AttributeError) as error:
                raise ConfigError(f"cannot import {model_name} ({error}); give module:Class importable here") from None
            return cls()
        if library_name == "transformers":
            if answer == NO_REPO:
                raise _not_found(model_name, answer, "so transformers has no config to build it from")
            return _transformers_model(path, trust_remote_code)
        try:
            import timm
        except ImportError:
            raise _not_found(model_name, answer, "and timm is not installed to build it by name (pip install "
                                                 "timm)") from None
        if "/" not in model_name and not timm.is_model(model_name):
            raise _not_found(model_name, answer, "nor a model name timm knows (timm.list_models())")
        return timm.create_model(model_name, pretrained=False)


def _transformers_model(path: Path, trust_remote_code: bool) -> Any:
    try:
        import transformers
    except ImportError:
        raise ConfigError("building a model from a config needs transformers: pip install transformers") from None
    if not path.exists():
        raise ConfigError(f"{path} does not exist; give a local model folder or config.json (nothing is downloaded)")
    config = transformers.AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code,
                                                     local_files_only=True)
    for architecture in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, architecture, None)
        if cls is not None:
            return cls(config)
    return transformers.AutoModel.from_config(config, trust_remote_code=trust_remote_code)


def estimate(model: Any, dtypes: list[str]) -> list[dict[str, Any]]:
    """Per dtype: bytes of the largest layer, of the whole model, and to train it with Adam."""
    from ..services.big_model.modeling import calculate_maximum_sizes

    total, (largest, _) = calculate_maximum_sizes(model)
    rows = []
    for dtype in dtypes:
        shrink = _SHRINK[dtype]
        # Adam: weights, gradients and two moments; half precision keeps fp32 master weights,
        # so both need 16 bytes per parameter. Quantised weights are not trained directly.
        training = total * 4 if dtype in ("float32", "float16", "bfloat16") else None
        rows.append({"dtype": dtype, "largest_layer": largest // shrink, "total_size": total // shrink,
                     "training_with_adam": training})
    return rows


def human(size: int | None) -> str:
    if size is None:
        return "N/A"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.2f} {unit}" if unit != "B" else f"{size} B"
        size /= 1024
    return str(size)


def run_estimate(args: argparse.Namespace, verify: Any = None) -> int:
    """``drivetrain estimate-memory``; ``verify`` replaces :func:`verify_on_hub`."""
    model = build_empty_model(args.model_name, args.library_name, getattr(args, "trust_remote_code", False),
                              getattr(args, "access_token", None), verify)
    rows = estimate(model, list(args.dtypes))
    if args.json:
        emit(rows)
        return 0
    headers = ("dtype", "Largest Layer", "Total Size", "Training using Adam")
    table = [(r["dtype"], human(r["largest_layer"]), human(r["total_size"]), human(r["training_with_adam"]))
             for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
    print(f"Memory usage for loading {args.model_name}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in table:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    return 0
