"""Click value types the commands share."""

from __future__ import annotations

import math

import click


class Finite(click.FloatRange):
    """A FloatRange that also refuses nan and the infinities, which a range check lets through (nan
    compares false with every bound, and a range open on one side admits that side's infinity)."""

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"expected a finite number, got {value!r}", param, ctx)
        return super().convert(number, param, ctx)


#: Seconds of a time limit: finite and above zero.
SECONDS = Finite(min=0, min_open=True)
