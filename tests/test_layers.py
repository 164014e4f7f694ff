"""The core's layers: one import direction, imports inside functions and type-only ones included.

Every module of ``core/drivetrain`` belongs to one layer (its folder, or ``_PLACED`` for the
packages outside their layer's folder); the rest is the surface, the top layer. A module
imports modules of its own layer and of the layers below it, never above, and nothing in the
core imports the surface (``plugin_api``, Accelerate's import paths): those re-export the core
for plugins and users, and hold no logic of their own (no class, no function longer than a
lazy look-up). Imports under ``if TYPE_CHECKING:`` count as any other: a type named from a
layer above is a dependency on it all the same. The graph has no cycle, and the kernel imports
no torch, not even inside a function (type-only imports aside: they never run). See
docs/architecture.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "core"
PACKAGE = "drivetrain"

#: Modules that re-export the layers for plugins and users; the core never imports them.
SURFACE = "surface"
#: Bottom to top. ``commands`` (Accelerate's command modules, over ``cli``) and ``test_utils``
#: (Accelerate's test helpers, over the whole core) are layers of their own above ``cli``.
LAYERS = ("kernel", "tensors", "selection", "config", "runtime", "services", "facade", "cli", "commands",
          "test_utils", SURFACE)

#: Modules whose layer is not their folder (module name without ``drivetrain.``): the hook specs
#: belong to the kernel and stay at ``drivetrain.hookspecs`` while their documentation is reworked;
#: ``_compat`` is the aliasing of moved modules, which imports nothing of the core.
_PLACED_BY_LAYER: dict[str, tuple[str, ...]] = {
    "kernel": (
        "hookspecs",
        "_compat",
    ),
}
#: The longest function a surface module may define: a lazy look-up of the names it re-exports.
SURFACE_FUNCTION_LINES = 25
_PLACED = {module: layer for layer, modules in _PLACED_BY_LAYER.items() for module in modules}


def _module_files() -> dict[str, Path]:
    files = {}
    for path in sorted((CORE / PACKAGE).rglob("*.py")):
        parts = path.relative_to(CORE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    return files


FILES = _module_files()


def layer_of(module: str) -> str:
    """The layer of a module: its entry in ``_PLACED``, else its layer folder, else the surface."""
    name = module[len(PACKAGE) + 1:] if module != PACKAGE else ""
    for prefix in sorted(_PLACED, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "."):
            return _PLACED[prefix]
    top = name.split(".")[0]
    if top in LAYERS:
        return top
    return SURFACE


def _resolve(name: str) -> str | None:
    parts = name.split(".")
    while parts:
        if ".".join(parts) in FILES:
            return ".".join(parts)
        parts.pop()
    return None


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(module: str, type_only: bool = True) -> list[tuple[str, int]]:
    """``(imported module, line)`` for every import, module level or inside a function, and
    (unless ``type_only`` is false) those under ``if TYPE_CHECKING:``.

    ``from package import name`` counts as importing ``package.name`` when that is a module,
    else ``package`` (its ``__init__`` runs, and whatever it imports)."""
    path = FILES[module]
    tree = ast.parse(path.read_text(), str(path))
    base_package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if not type_only and isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(child: ast.AST) -> None:
        if isinstance(child, ast.Import):
            found.extend((alias.name, child.lineno) for alias in child.names)
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = base_package
                for _ in range(child.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{child.module}" if child.module else base
            else:
                source = child.module or ""
            for alias in child.names:
                submodule = f"{source}.{alias.name}"
                found.append((submodule if submodule in FILES else source, child.lineno))
        visit(child)

    visit(tree)
    return found


def _core_edges() -> dict[str, dict[str, int]]:
    edges: dict[str, dict[str, int]] = {}
    for module in FILES:
        targets = edges.setdefault(module, {})
        for name, line in imports_of(module):
            target = _resolve(name) if name.split(".")[0] == PACKAGE else None
            if target is not None and target != module:
                targets.setdefault(target, line)
    return edges


EDGES = _core_edges()


def _cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_core_has_no_import_cycle() -> None:
    cycles = _cycles(EDGES)
    described = [
        "; ".join(f"{source} -> {target} (line {EDGES[source][target]})"
                  for source in cycle for target in EDGES[source] if target in cycle)
        for cycle in cycles
    ]
    assert not cycles, "import cycles: " + " | ".join(described)


def test_the_cycle_check_sees_imports_inside_functions() -> None:
    assert _cycles({"a": {"b": 1}, "b": {"a": 2}}) == [["a", "b"]]
    # a deferred import is an edge (the facade builds its trackers with an import inside the method)
    source = FILES["drivetrain.facade.accelerator"].read_text().splitlines()
    line = next(number for number, text in enumerate(source, 1) if text.endswith(" import Trackers"))
    tracking = source[line - 1].split()[1].lstrip(".")
    assert (f"drivetrain.{tracking}", line) in imports_of("drivetrain.facade.accelerator")


def test_each_layer_imports_only_its_own_and_lower_layers() -> None:
    rank = {layer: position for position, layer in enumerate(LAYERS)}
    wrong = []
    for source, targets in EDGES.items():
        own = layer_of(source)
        for target, line in targets.items():
            other = layer_of(target)
            if rank[other] > rank[own] or (other == SURFACE and own != SURFACE):
                wrong.append(f"{source}:{line} ({own}) imports {target} ({other})")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_every_layer_module_exists() -> None:
    missing = [name for name in _PLACED if f"{PACKAGE}.{name}" not in FILES]
    assert not missing, f"_PLACED names modules that do not exist: {missing}"


def test_the_kernel_imports_no_torch() -> None:
    kernel = [module for module in FILES if layer_of(module) == "kernel"]
    assert kernel
    heavy = [f"{module}:{line} imports {name}" for module in kernel for name, line in imports_of(module, type_only=False)
             if name.split(".")[0] in {"torch", "numpy", "safetensors"}]
    assert not heavy, "\n".join(heavy)


def test_type_only_imports_are_counted() -> None:
    # the hook specs name their argument types under TYPE_CHECKING: from the kernel's protocols
    hookspecs = dict(imports_of("drivetrain.hookspecs.step"))
    assert "drivetrain.kernel.hook_types" in {_resolve(name) for name in hookspecs}
    assert "drivetrain.kernel.hook_types" not in {
        _resolve(name) for name, _line in imports_of("drivetrain.hookspecs.step", type_only=False)}


def test_every_module_has_a_layer_and_the_surface_holds_no_logic() -> None:
    assert all(layer_of(module) in LAYERS for module in FILES)
    logic = []
    for module, path in FILES.items():
        if layer_of(module) != SURFACE:
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                logic.append(f"{module}:{node.lineno} class {node.name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    node.end_lineno - node.lineno + 1 > SURFACE_FUNCTION_LINES:
                logic.append(f"{module}:{node.lineno} def {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not logic, "logic in surface modules (move it into its layer, re-export it here):\n" + "\n".join(logic)


COMPAT_PATHS = [
    "drivetrain.plugin_api.descriptors", "drivetrain.errors", "drivetrain.version", "drivetrain.environment",
    "drivetrain.plugin_guard", "drivetrain.plugin_manager", "drivetrain.registration", "drivetrain.public_names",
    "drivetrain.accelerator", "drivetrain.state", "drivetrain.platform", "drivetrain.logging", "drivetrain.run",
    "drivetrain.kwargs_handlers", "drivetrain.optimizer", "drivetrain.utils.environment", "drivetrain.cluster",
    "drivetrain.detection", "drivetrain.use_variables", "drivetrain.enums", "drivetrain.utils.constants",
    "drivetrain.utils.versions", "drivetrain.tracking", "drivetrain.memory", "drivetrain.hooks",
    "drivetrain.big_modeling",
    "drivetrain.inference", "drivetrain.launchers", "drivetrain.local_sgd", "drivetrain.utils.modeling",
    "drivetrain.utils.offload", "drivetrain.utils.device_map", "drivetrain.utils.weights_loading",
    "drivetrain.utils.random", "drivetrain.utils.imports", "drivetrain.utils.other", "drivetrain.utils.launch",
    "drivetrain.commands.config.config_args",
]  # not drivetrain.utils.tqdm: importing it as a module makes `drivetrain.utils.tqdm` the module, not the function


@pytest.mark.parametrize("module", COMPAT_PATHS)

def test_compat_paths_are_the_moved_modules(module: str) -> None:
    import importlib

    old = importlib.import_module(module)
    assert importlib.import_module(old.__name__) is old
    assert old.__name__ != module


@pytest.mark.parametrize(("old", "new"), [("drivetrain.checkpointing", "drivetrain.services.checkpointing"),
                                          ("drivetrain.data_loader", "drivetrain.services.data_loader")])
def test_a_moved_package_and_its_submodules_are_the_moved_ones(old: str, new: str) -> None:
    import importlib

    assert importlib.import_module(old) is importlib.import_module(new)
    for path in sorted((CORE.joinpath(*new.split("."))).glob("*.py")):
        if path.stem == "__init__":
            continue
        moved = importlib.import_module(f"{new}.{path.stem}")
        assert importlib.import_module(f"{old}.{path.stem}") is moved
        assert getattr(importlib.import_module(old), path.stem) is moved


def test_each_compat_path_imports_first_in_a_fresh_interpreter() -> None:
    # In this process most modules are loaded already; a compat path imported before its
    # package's other modules (``import drivetrain.enums`` as a script's first line) once
    # recursed in the selection package's lazy names. One interpreter, drivetrain unloaded
    # before each import.
    import subprocess
    import sys

    code = ("import importlib, sys\n"
            f"for name in {COMPAT_PATHS!r}:\n"
            "    for loaded in [m for m in sys.modules if m == 'drivetrain' or m.startswith('drivetrain.')]:\n"
            "        del sys.modules[loaded]\n"
            "    importlib.import_module(name)\n"
            "print('IMPORTED', len(" + repr(COMPAT_PATHS) + "))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "IMPORTED" in result.stdout, result.stderr[-3000:]


def test_services_are_never_given_the_accelerator() -> None:
    # What a service needs of an Accelerator is its Session (runtime/session.py); a parameter named
    # `accelerator` would be the facade coming back in through a call.
    given = []
    for module, path in FILES.items():
        if layer_of(module) not in {"runtime", "services"}:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
                if "accelerator" in names:
                    given.append(f"{module}:{node.lineno} {node.name}(accelerator, ...)")
    assert not given, "services and the runtime take a Session, not the Accelerator:\n" + "\n".join(given)
