"""``python -m solver`` runs the ``solve`` command."""

from solver.cli import main

main()
