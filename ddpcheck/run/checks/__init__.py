"""The runtime checks: one module per probe, discovered by ddpcheck/run/registry.py (which says how to
add one). Each module holds its checks' pages (the class docstrings), its in-rank `capture` and its
`judge` across ranks; importing it never imports torch."""
