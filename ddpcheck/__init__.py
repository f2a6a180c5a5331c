"""ddpcheck: find the mistakes that make DistributedDataParallel training silently wrong, slow or hung."""

__version__ = "0.1.0"
