"""Accelerate's attributes of a backend on ``Accelerator``, ``AcceleratorState`` and ``GradientState``.

A script written for Accelerate reads ``accelerator.deepspeed_plugin``, ``state.is_fsdp2`` or
``accelerator.fp8_enabled``. The core names no backend, so these attributes are not written in
its classes: a plugin declares each one with a :class:`~drivetrain.plugin_api.BackendAttribute`
(hook ``drivetrain_register_backend_attributes``), and :func:`install_declared` puts one
:class:`DeclaredAttribute` descriptor per declaration on the owner class when a process state
is set up. ``Accelerator.is_fsdp2`` is then a class attribute that names the plugin that
declared it (``declared_by``), and ``vars(Accelerator)`` lists them all.

The owner classes are marked with :func:`backend_attribute_host` and answer two questions
(:class:`BackendAttributeHost`): which run is theirs, and which backend arguments their
constructor was given. A strategy's ``accelerator_arguments`` ending in ``_plugin``
(``fsdp_plugin``) are attributes of ``Accelerator`` and ``AcceleratorState`` too, reading the
value given (``None`` unless given), as in Accelerate; a plugin's declaration of the same
name wins.

No fall-through: a name nobody declared is an ``AttributeError`` raised by Python itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, TypeVar

from ..kernel.descriptors import ATTRIBUTE_OWNERS, BackendAttribute

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel.plugin_manager import PluginManager
    from .run import Run

HOOK = "drivetrain_register_backend_attributes"


class BackendAttributeHost(Protocol):
    """What an owner class of declared attributes tells its descriptors."""

    def _backend_run(self, name: str) -> Run | None:
        """The run whose extensions answer first (``None``: no run yet); raises the class's own
        ``AttributeError`` when reading ``name`` makes no sense now (a reset state)."""

    def _backend_arguments(self) -> Mapping[str, Any]:
        """The backend arguments the constructor was given, by name."""


class DeclaredAttribute:
    """The descriptor of one declared attribute (a non-data descriptor: a value set on the
    instance, as a step sets ``gradient_state.is_xla_gradients_synced``, wins)."""

    def __init__(self, declaration: BackendAttribute, declared_by: str) -> None:
        self.declaration = declaration
        self.name = declaration.name
        self.declared_by = declared_by
        self.__doc__ = declaration.description or f"Accelerate's {declaration.owner}.{declaration.name}"

    def __get__(self, instance: BackendAttributeHost | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        run = instance._backend_run(self.name)
        if run is not None:
            try:
                return run.extension_attribute(self.name)
            except AttributeError:
                pass
        arguments = instance._backend_arguments()
        if self.name in arguments:
            return arguments[self.name]
        return self.declaration.unused

    def __repr__(self) -> str:
        return f"<attribute {self.declaration.owner}.{self.name} declared by plugin {self.declared_by!r}>"


_HOSTS: dict[str, type] = {}
# What install_declared put on the hosts, and for which plugin manager.
_installed: dict[str, DeclaredAttribute] = {}
_installed_for: list[Any] = [None]

H = TypeVar("H", bound=type)


def backend_attribute_host(owner: str) -> Callable[[H], H]:
    """Mark a class as the owner ``owner`` (one of ``ATTRIBUTE_OWNERS``) of declared attributes."""
    if owner not in ATTRIBUTE_OWNERS:
        raise ValueError(f"{owner!r} is not one of {ATTRIBUTE_OWNERS}")

    def mark(cls: H) -> H:
        _HOSTS[owner] = cls
        if _installed_for[0] is not None:
            _install(_installed_for[0], {owner: cls})
        return cls

    return mark


def declarations(manager: PluginManager) -> list[tuple[str, BackendAttribute]]:
    """Every declared attribute and the plugin that declared it: the plugins' declarations
    first, then each strategy's ``<backend>_plugin`` argument on ``Accelerator`` and
    ``AcceleratorState`` (reading ``None`` while not given), unless declared already."""
    declared = [(plugin, item) for plugin, item in manager.registrations(HOOK)]
    taken = {(item.owner, item.name) for _plugin, item in declared}
    for plugin, spec in manager.registrations("drivetrain_register_strategies"):
        for argument in spec.accelerator_arguments:
            if not argument.endswith("_plugin"):
                continue
            for owner in ("Accelerator", "AcceleratorState"):
                if (owner, argument) not in taken:
                    taken.add((owner, argument))
                    declared.append((plugin, BackendAttribute(
                        owner=owner, name=argument, description=f"the {argument} argument (None unless given)")))
    return declared


def install_declared(manager: PluginManager) -> None:
    """Put the declared attributes of ``manager``'s plugins on their owner classes (once per
    manager: the descriptors of a previous manager are taken off first)."""
    if _installed_for[0] is manager:
        return
    for key, descriptor in list(_installed.items()):
        owner = _HOSTS.get(descriptor.declaration.owner)
        if owner is not None and vars(owner).get(descriptor.name) is descriptor:
            delattr(owner, descriptor.name)
        del _installed[key]
    _installed_for[0] = manager
    _install(manager, _HOSTS)


def _install(manager: PluginManager, hosts: Mapping[str, type]) -> None:
    for plugin, declaration in declarations(manager):
        host = hosts.get(declaration.owner)
        if host is None or any(declaration.name in vars(klass) for klass in host.__mro__):
            continue  # the class's own member wins; a plugin cannot replace it
        descriptor = DeclaredAttribute(declaration, plugin)
        setattr(host, declaration.name, descriptor)
        _installed[f"{declaration.owner}.{declaration.name}"] = descriptor


def declared_attributes() -> dict[str, DeclaredAttribute]:
    """What is installed now, by ``"Owner.name"`` (the table ``docs/architecture.md`` shows)."""
    return dict(_installed)
