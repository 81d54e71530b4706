"""Engine names to engine classes, imported only when a name is used.

``gp`` and ``pom`` pull in torch and BoTorch; a study on ``random`` never pays for that import.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from typing import Any

from engines.base import Engine
from engines.errors import EngineOptionsError

_ENGINES: dict[str, str] = {
    "random": "engines.quasirandom:RandomEngine",
    "gp": "engines.gp:GPEngine",
    "turbo-enn": "engines.turbo_enn:TurboENNEngine",
    "pom": "engines.pom:POMEngine",
    "lcbo": "engines.lcbo:LCBOEngine",
    "pbt": "engines.pbt:PBTEngine",
    "ipbt": "engines.ipbt:IPBTEngine",
    "mwgd": "engines.mwgd:MWGDEngine",
    "auto": "engines.auto:AutoEngine",
}


def engine_names() -> list[str]:
    return sorted(_ENGINES)


def engine_modules() -> list[str]:
    """The modules that define the engines (a process that imports them all once, such as the
    server's engine process starter, spares each engine process the import)."""
    return sorted({path.split(":")[0] for path in _ENGINES.values()})


def engine_class(name: str) -> type[Engine]:
    """The class registered under ``name``.

    Raises:
        EngineOptionsError: the name is unknown.
    """
    try:
        module_name, class_name = _ENGINES[name].split(":")
    except KeyError:
        raise EngineOptionsError(
            f"unknown engine {name!r}; choose one of {engine_names()}"
        ) from None
    return getattr(importlib.import_module(module_name), class_name)


def make_engine(name: str, options: dict[str, Any] | None = None) -> Engine:
    """Build engine ``name`` with ``options``; options are the dataclass fields of its class.

    Raises:
        EngineOptionsError: an unknown name, an unknown option, or a value of the wrong type or
            out of range (the engine's ``__post_init__`` checks ranges).
    """
    cls = engine_class(name)
    options = dict(options or {})
    # Every engine class is a dataclass (its options are its fields).
    fields = {f.name: f for f in dataclasses.fields(typing.cast(Any, cls))}
    unknown = sorted(set(options) - set(fields))
    if unknown:
        known = sorted(fields) or "none"
        raise EngineOptionsError(
            f"engine {name!r} has no option(s) {unknown}; its options: {known}"
        )
    hints = typing.get_type_hints(cls)
    for key, value in options.items():
        _check_type(name, key, value, hints[key])
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise EngineOptionsError(f"engine {name!r}: {exc}") from None


def _check_type(engine: str, key: str, value: Any, hint: Any) -> None:
    allowed = typing.get_args(hint) or (hint,)
    ok = False
    for t in allowed:
        if t is type(None):
            ok = ok or value is None
        elif t is float:
            ok = ok or (isinstance(value, int | float) and not isinstance(value, bool))
        elif t is int:
            ok = ok or (isinstance(value, int) and not isinstance(value, bool))
        elif isinstance(t, type):
            ok = ok or isinstance(value, t)
        else:  # Literal[...] and other typing forms: accept the literal values
            ok = ok or value in typing.get_args(t) or value == t
    if not ok:
        raise EngineOptionsError(f"engine {engine!r}: option {key!r} got {value!r} of wrong type")
