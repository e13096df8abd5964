"""``python -m solver.cli`` runs the ``solve`` command."""

from solver.cli import main

main()
