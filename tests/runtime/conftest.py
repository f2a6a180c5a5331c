"""Runtime tests launch real multi-rank jobs; helpers live in rt_helpers.py (a unique module name,
so it never clashes with another conftest)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: launches processes (a real multi-rank job)")
