"""How long each piece of the planner takes (``solve bench``), on the shipped rigs and on a sweep.

For every rig it times the range-walk table, the arc table, the DP and exhaustive oracles, and
end to end (read the files, then ``plan_rig``, whose CP-SAT call is hinted by the DP exactly as
``solve`` runs it; the CP-SAT share is that call's own wall time). Each piece runs ``--repeat``
times, or fewer once its runs have spent ``--budget`` seconds (at least once), so the defaults stay
quick while slow pieces still get measured. Import time comes from fresh interpreters, the way a
user pays it. ``--sweep`` does the same on synthetic rigs of growing GPUs and layers (card kinds,
hosts and orders as asked), and plans each once more in a fresh interpreter for its process time
and peak memory.

Nothing here asserts a time: the numbers are reported (medians, min, max, runs), never checked.
"""
