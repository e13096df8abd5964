"""The ``solve`` group: ``solve RIG`` means ``solve plan RIG``, one help page shows both, and a usage
error is one line."""

from __future__ import annotations

import importlib
from typing import ClassVar

import click

from solver.exitcodes import ExitCode


class UsageLine(click.ClickException):
    """Bad usage as one line, ``Error: ...``, exit 2."""

    exit_code = ExitCode.INPUT


class DefaultToPlan(click.Group):
    """A group whose default command is ``plan``: ``solve RIG`` means ``solve plan RIG``.

    Subcommands in ``LAZY`` are imported only when named, so ``solve RIG`` never loads them.
    """

    LAZY: ClassVar[dict[str, str]] = {
        "bench": "solver.cli.bench:bench",
        "calibrate": "solver.cli.calibrate:calibrate_cmd",
        "model": "solver.cli.model:model_group",
        "probe": "solver.cli.probe:probe_cmd",
        "profile": "solver.cli.profile:profile_group",
        "rig": "solver.cli.rig:rig_group",
        "score": "solver.cli.score:score",
        "verify": "solver.cli.verify:verify",
    }

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        known = (*self.commands, *self.LAZY, "--help", "-h", "--version")
        if args and args[0] not in known:
            # solve RIG --help: the plan's help is the group's own (format_help below)
            args = ["--help"] if {"--help", "-h"} & set(args) else ["plan", *args]
        return super().parse_args(ctx, args)

    #: (command, what it does) for ``solve --help``.
    EXAMPLES: ClassVar[tuple[tuple[str, str], ...]] = (
        ("solve rigs/box.yaml", "plan the shipped four-GPU box; tables on stdout"),
        ("solve rigs/box.yaml --order auto --check", "also choose the GPU order; verify with an oracle"),
        ("solve rigs/duo.yaml --json --out plan.json", "the plan as one JSON object, also saved to a file"),
        ("solve rigs/box.yaml --context 65536 --export strata", "plan a 64K context; print the engine flags"),
        ("solve rigs/llama-mix.yaml --contexts 8K,32K,128K --kv-types f16,q8_0", "tokens/s at each context"),
        ("solve rigs/box.yaml --plot plan.svg", "draw VRAM and compute per GPU (.png, .svg or .pdf)"),
        (
            "solve rigs/llama-mix.yaml --export llama.cpp",
            "plan for llama.cpp; print the llama-server command",
        ),
        (
            "solve rigs/llama-mix.yaml --export llama.cpp --shell powershell",
            "the same, quoted for PowerShell",
        ),
        ("solve rigs/vllm-mix.yaml --objective throughput", "plan vLLM stages for batched serving"),
        ("solve score rigs/llama-mix.yaml -- -ngl 99 -ncmoe 80", "what your llama.cpp command does, per GPU"),
        ("solve probe -o rigs/mine.yaml", "write a rig from this machine's GPUs, to edit and plan"),
        ('solve rig new "RTX 4090" "RTX 3090" -o rigs/mine.yaml', "or from card names, without NVML"),
    )

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """``solve --help``: the plan's usage, options and examples, then the other commands."""
        plan = self.commands["plan"]
        formatter.write_usage(ctx.command_path, "RIG [OPTIONS]")
        formatter.write_usage(ctx.command_path, "COMMAND [ARGS]...", prefix="   or: ")
        self.format_help_text(ctx, formatter)
        plan_ctx = click.Context(plan, info_name=ctx.info_name)
        own_help = plan.get_help_option(plan_ctx)
        records = [
            p.get_help_record(plan_ctx)
            for p in plan.get_params(plan_ctx)
            if isinstance(p, click.Option) and p is not own_help
        ]
        records += [p.get_help_record(ctx) for p in self.get_params(ctx)]
        with formatter.section("Options"):
            formatter.write_dl([r for r in records if r])
        with formatter.section("Examples"):
            for command, what in self.EXAMPLES:
                formatter.write(f"{'':>{formatter.current_indent}}{command}\n")
                with formatter.indentation():
                    formatter.write_text(what)
        self.format_commands(ctx, formatter)
        formatter.write_paragraph()
        formatter.write_text("Run 'solve COMMAND --help' for a command's options.")

    def invoke(self, ctx: click.Context) -> object:
        """Run the command; a usage error is one line (click's own adds the usage and a hint), except
        a group called bare, which shows its help."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):
                raise
            raise UsageLine(exc.format_message()) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.LAZY:
            module, attr = self.LAZY[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)
