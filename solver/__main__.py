"""The ``solve`` console script, also run by ``python -m solver``.

The Ctrl-C handler goes in and the ``--time-limit`` clock starts before the CLI's imports, which take
a while, so an interrupt during them is one line too and the limit counts them.
"""

from __future__ import annotations

from solver import interrupt


def main() -> None:
    """Run the ``solve`` command under the Ctrl-C handler."""
    interrupt.start_clock()

    def command() -> None:
        from solver.cli import cli

        cli()

    interrupt.run(command)


if __name__ == "__main__":
    main()
