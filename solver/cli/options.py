"""Click value types and options the commands share, each spelled (and helped) once."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from solver.engines import ENGINES

F = TypeVar("F", bound=Callable[..., Any])


class Finite(click.FloatRange):
    """A FloatRange that also refuses nan and the infinities, which a range check lets through (nan
    compares false with every bound, and a range open on one side admits that side's infinity)."""

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"expected a finite number, got {value!r}", param, ctx)
        return super().convert(number, param, ctx)


class Tokens(click.ParamType):
    """A token count: 32768, 32K or 1M (K is 1,024 tokens), as ``--contexts`` takes them."""

    name = "TOKENS"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from solver.units import parse_tokens

        if isinstance(value, int):
            return value
        try:
            return parse_tokens(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


#: A context option's type.
TOKENS = Tokens()
#: Seconds of a time limit: finite and above zero.
SECONDS = Finite(min=0, min_open=True)
#: A file path option's type.
PATH = click.Path(path_type=Path)
#: What --objective chooses among.
OBJECTIVES = ("time", "mass", "throughput")


def default_workers() -> int:
    """CP-SAT workers: the machine's cores, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


def defaulted(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """An option whose default the help shows."""
    return click.option(*decls, show_default=True, **attrs)


def stacked(*options: Callable[[F], F]) -> Callable[[F], F]:
    """Several options as one decorator, listed in the help in the order given."""

    def apply(fn: F) -> F:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return apply


def grouped(**groups: type) -> Callable[[F], F]:
    """A command callback that takes its options as frozen dataclasses, so that the work below it gets
    a few typed objects instead of every option: each keyword names a parameter given an instance of
    its class, built from the click parameters named like the class's fields; the other parameters
    pass as they are."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(**params: Any) -> Any:
            for name, cls in groups.items():
                params[name] = cls(**{f.name: params.pop(f.name) for f in dataclasses.fields(cls)})
            return fn(**params)

        return run  # type: ignore[return-value]

    return wrap


def json_option(help: str = "Print one JSON object instead of tables.") -> Callable[[F], F]:
    """``--json``, passed as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def engine_option(help: str) -> Callable[[F], F]:
    """``--engine``: one of the engines, None for the rig's own."""
    return click.option("--engine", type=click.Choice(ENGINES), help=help)


def workers_option(help: str = "CP-SAT worker threads.", **attrs: Any) -> Callable[[F], F]:
    """``--workers``: CP-SAT's threads (None for default_workers unless ``attrs`` sets a default)."""
    attrs.setdefault("default", None)
    return click.option("--workers", type=click.IntRange(min=1), help=help, **attrs)


#: ``--model``: a model file that replaces the one the rig names.
MODEL = click.option("--model", type=PATH, help="Model file, instead of the rig's.")
#: ``--profile``: a routing profile that replaces the one the model names.
PROFILE = click.option("--profile", type=PATH, help="Routing profile, instead of the model's.")
