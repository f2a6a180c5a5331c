"""`ddpcheck run`: the runtime half. Only code under this package may import torch, and only lazily."""
