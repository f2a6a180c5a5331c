"""`ddpcheck run --rehearse`: the launcher side of a rehearsal at world sizes too large to run as
processes here (the rank side is ddpcheck/run/rank/rehearsal.py)."""
