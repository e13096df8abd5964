"""The ``solve`` command: ``solve RIG`` plans a rig; subcommands add tools around it.

One module per command (plan, probe, calibrate, model, rig, profile, score, bench, verify); every one
but ``plan`` is imported only when named (solver.cli.group), so ``solve RIG`` loads none of them.
"""

from __future__ import annotations

import click

from solver import interrupt
from solver.cli.group import DefaultToPlan
from solver.cli.plan import plan_cmd


@click.group(cls=DefaultToPlan, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="moesplit")
def cli() -> None:
    """Plan the layer split of an MoE model over mismatched GPUs.

    RIG is a YAML file listing the GPUs in pipeline order (free VRAM, speed) and naming the model (and,
    for the Strata engine, its routing profile). The plan chooses the cut points (and, with --order
    auto, the GPU order) that minimise the predicted decode window under every card's memory for the
    engine that will run it (strata, llama.cpp, vllm, sglang), proves it optimal with an exact DP or
    CP-SAT, and shows it beside what the engine does by default. File formats and the arithmetic:
    docs/reference.md; the engines: docs/engines.md.
    """


cli.add_command(plan_cmd)


def main() -> None:
    """``python -m solver.cli``: the CLI with Ctrl-C as one line and exit 130 (the ``solve`` script is
    ``solver.__main__.main``, which catches it from before these imports)."""
    interrupt.run(cli)
