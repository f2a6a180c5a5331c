"""Code that runs in the `ddpcheck run` process (entry.py starts it, job.py is one job's pipeline). Never inside a rank."""
