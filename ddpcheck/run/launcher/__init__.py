"""Code that runs in the `ddpcheck run` process (entry.py is the pipeline). Never inside a rank."""
