"""``python -m solver`` runs the ``solve`` command."""

from solver.interrupt import main

main()
