"""`ddpcheck trace`: explain a hung or crashed job from PyTorch Flight Recorder dumps.

Torch-free on purpose (a laptop without torch reads a cluster's dumps):

    dumps.read_all (pickle / JSON, one file per rank) → align.compare (per process group, by
    sequence id) → verdicts.findings (DDP128 / DDP129 / DDP123 / DDP120) → causes.attach
    (static findings on the divergent path) → the shared reporters

Nothing here imports lint or run internals; the command (commands.py) hands in a function that
lints the user's files.
"""
