"""Code that runs inside every rank (and every process of a spawn-style job): bootstrap.py starts a
rank, instrument.py installs what ddpcheck needs once torch is imported, session.py holds the
rank's state and the hook lists probes attach to."""
