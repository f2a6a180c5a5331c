from ddpcheck.findings import Severity
from ddpcheck.run.catalog import RuntimeCheck


class DatasetRngRepeats(RuntimeCheck):
    """A random-number object held by the Dataset starts in the same state in several DataLoader workers.

    ## Why it matters

    torch 2.13 seeds the global `random`, `torch` and (when installed) `numpy.random` generators in
    each DataLoader worker from `base_seed + worker_id`, but a `numpy.random.Generator`,
    `numpy.random.RandomState`, `random.Random` or `torch.Generator` that the Dataset creates in
    `__init__` is copied into every worker in the state it has: the workers draw the same "random"
    crops, flips and noise, and non-persistent workers start from that same copy again every
    epoch. ddpcheck looks at the random-number objects reachable from the dataset in each worker
    (after `worker_init_fn`), notes whether the first fetches drew from them, and reports an object
    that started from the same state in two workers, epochs or ranks and was drawn from.

    ## How to fix

    Create the generator per worker in a `worker_init_fn` from
    `torch.utils.data.get_worker_info().seed`, which differs between workers and epochs (and
    between ranks when their base seeds do), or draw from the global generators, which torch
    reseeds per worker.

    ## References

    - https://pytorch.org/docs/stable/data.html#randomness-in-multi-process-data-loading
    - https://pytorch.org/docs/stable/notes/faq.html#my-data-loader-workers-return-identical-random-numbers
    - https://github.com/pytorch/pytorch/issues/5059
    """

    code = "DDP147"
    name = "dataset-rng-repeats"
    severity = Severity.WARNING
    BAD = """
        class Augmented(Dataset):
            def __init__(self, files):
                self.files = files
                self.rng = np.random.default_rng(0)  # one state, copied into every worker

            def __getitem__(self, i):
                return random_crop(load(self.files[i]), self.rng)
    """
    GOOD = """
        def seed_worker(worker_id):
            info = torch.utils.data.get_worker_info()
            info.dataset.rng = np.random.default_rng(info.seed)

        loader = DataLoader(data, num_workers=4, worker_init_fn=seed_worker, sampler=sampler)
    """
