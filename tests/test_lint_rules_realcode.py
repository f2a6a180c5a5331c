"""Rule behaviour on ways real DDP scripts log, print and split their data, through `ddpcheck lint`:
each test writes a small project in that style and reads the findings a user sees."""

from __future__ import annotations

from tests.helpers import lint_project


def _lines(findings: list[dict], code: str) -> list[int]:
    return sorted(f["location"]["line"] for f in findings if f["code"] == code)


LOOP_WITH_LOGGING = """\
    import logging
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    LOGGER = logging.getLogger(__name__)


    def main():
        rank = int(os.environ["RANK"])
        dist.init_process_group("nccl")
        {setup}
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[int(os.environ["LOCAL_RANK"])])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(10):
            for step, x in enumerate(loader):
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
                LOGGER.info("epoch %d step %d loss %.3f", epoch, step, loss.item())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def _logging_script(setup: str) -> str:
    return LOOP_WITH_LOGGING.replace("{setup}", setup)


def test_every_rank_logging_is_reported_when_the_format_does_not_name_the_rank(tmp_path):
    text = _logging_script('logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO)')
    assert _lines(lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP020"), "DDP020") == [21]


def test_a_log_format_that_carries_the_rank_is_per_rank_output(tmp_path):
    text = _logging_script('logging.basicConfig(format=f"[rank={rank}] %(asctime)s %(message)s", level=logging.INFO)')
    assert _lines(lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP020"), "DDP020") == []


def test_a_formatter_built_with_the_rank_is_per_rank_output(tmp_path):
    setup = ('handler = logging.StreamHandler()\n'
             '        handler.setFormatter(logging.Formatter(f"%(asctime)s rank {rank}: %(message)s"))\n'
             '        LOGGER.addHandler(handler)')
    text = _logging_script(setup)
    assert _lines(lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP020"), "DDP020") == []


def test_a_log_level_variable_raised_off_rank_zero_in_a_helper_module_silences_the_others(tmp_path):
    helper = """\
        import logging
        import torch.distributed as dist


        def setup_logger(path):
            level = logging.INFO
            if dist.is_initialized() and dist.get_rank() != 0:
                level = logging.WARNING
            logging.basicConfig(level=level, filename=path)
    """
    text = _logging_script("from logsetup import setup_logger\n        setup_logger('train.log')")
    findings = lint_project(tmp_path, {"train.py": text, "logsetup.py": helper}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == []


def test_a_log_level_variable_set_the_same_on_every_rank_silences_nothing(tmp_path):
    helper = """\
        import logging


        def setup_logger(path, verbose):
            level = logging.INFO
            if verbose:
                level = logging.DEBUG
            logging.basicConfig(level=level, filename=path)
    """
    text = _logging_script("from logsetup import setup_logger\n        setup_logger('train.log', False)")
    findings = lint_project(tmp_path, {"train.py": text, "logsetup.py": helper}, "train.py", select="DDP020")
    assert _lines(findings, "DDP020") == [22]


def test_tqdm_write_in_the_epoch_loop_runs_on_every_rank(tmp_path):
    text = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from tqdm import tqdm


        def main():
            dist.init_process_group("nccl")
            rank = dist.get_rank()
            model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[0])
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                total = 0.0
                for x in tqdm(loader, disable=rank != 0):
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    total += loss.item()
                tqdm.write(f"Epoch: {epoch}")
                tqdm.write(f"Train loss: {total:.4f}")
                if rank == 0:
                    tqdm.write("saved")
            dist.destroy_process_group()


        if __name__ == "__main__":
            main()
    """
    assert _lines(lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP020"), "DDP020") == [19, 20]


STRIDE_SPLITS = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train(rows, model, optimizer):
        for epoch in range(10):
            for x in rows:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()


    def evaluate(rows, model):
        with torch.no_grad():
            return sum(model(x).sum().item() for x in rows)


    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        ws = dist.get_world_size()
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[int(os.environ["LOCAL_RANK"])])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        rows, val_rows = load_rows()
        train_index = list(range(rank, len(rows), ws))
        val_index = list(range(rank, len(val_rows), ws))
        train([rows[i] for i in train_index], model, optimizer)
        evaluate([val_rows[i] for i in val_index], model)
        for i in range(rank, len(shards), ws):
            model(load(shards[i])).sum().backward()
            optimizer.step()
        for i in range(rank, len(files), ws):
            convert(files[i])
        warmup_rows = rows[:val_index[0]]  # a boundary taken from the evaluation index, not its rows
        train(warmup_rows, model, optimizer)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""


def test_stride_splits_by_range_that_feed_training_are_uneven_inputs(tmp_path):
    findings = lint_project(tmp_path, {"train.py": STRIDE_SPLITS}, "train.py", select="DDP034")
    # the training index (followed into `train`) and the loop that back-propagates per shard;
    # not the evaluation index, nor the conversion loop without a backward
    assert _lines(findings, "DDP034") == [27, 31]


def test_the_world_size_is_read_by_value_not_by_name(tmp_path):
    text = """\
        import os
        import torch
        import torch.distributed as dist

        dist.init_process_group("nccl")
        world = int(os.environ["WORLD_SIZE"])
        rank = int(os.environ["RANK"])
        files = sorted(os.listdir("data"))[rank::world]
        every_third = sorted(os.listdir("data"))[rank::3]
        for path in files:
            model(torch.load(path)).sum().backward()
            optimizer.step()
    """
    assert _lines(lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP034"), "DDP034") == [8]


def test_equal_blocks_that_drop_the_remainder_are_even(tmp_path):
    text = """\
        import torch.distributed as dist

        dist.init_process_group("nccl")
        world = dist.get_world_size()
        rank = dist.get_rank()
        per = len(files) // world
        mine = files[rank * per:(rank + 1) * per]
        for path in mine:
            model(load(path)).sum().backward()
            optimizer.step()
    """
    assert _lines(lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP034"), "DDP034") == []


NAN_SKIP = """\
    import math
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def train_one_epoch(model, loader, optimizer):
        for images, labels in loader:
            loss = model(images, labels)
            if torch.isnan(loss):
                print("loss is nan, skipping this batch")
                optimizer.zero_grad(set_to_none=True)
                continue
            loss.backward()
            optimizer.step()
            if not math.isfinite(loss.item()):
                continue
            log(loss)


    def main():
        dist.init_process_group("nccl")
        model = DDP(build().cuda(), device_ids=[0])
        optimizer = torch.optim.AdamW(model.parameters())
        for epoch in range(10):
            train_one_epoch(model, loader, optimizer)


    if __name__ == "__main__":
        main()
"""


def test_a_rank_local_continue_before_the_backward_is_reported(tmp_path):
    findings = lint_project(tmp_path, {"train.py": NAN_SKIP}, "train.py", select="DDP035")
    # the skip before the backward; not the one after it (it skips only the logging)
    assert _lines(findings, "DDP035") == [13]


def test_a_continue_agreed_across_ranks_is_not_reported(tmp_path):
    text = NAN_SKIP.replace(
        "            if torch.isnan(loss):\n",
        "            bad = torch.isnan(loss).float()\n"
        "            dist.all_reduce(bad, op=dist.ReduceOp.MAX)\n"
        "            if bad.item() > 0:\n")
    assert _lines(lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP035"), "DDP035") == []


def test_a_training_loss_summed_over_the_shard_is_not_an_evaluation_metric(tmp_path):
    text = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, DistributedSampler


        def fit(model, optimizer, train_set, val_set, rank):
            train_loader = DataLoader(train_set, batch_size=8, sampler=DistributedSampler(train_set))
            val_loader = DataLoader(val_set, batch_size=8, sampler=DistributedSampler(val_set, shuffle=False))
            for epoch in range(10):
                train_loss = 0.0
                for x, y in train_loader:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    train_loss += loss.item()
                val_loss = 0.0
                with torch.no_grad():
                    for x, y in val_loader:
                        val_loss += torch.nn.functional.mse_loss(model(x), y).item()
                if rank == 0:
                    print(f"epoch {epoch} train {train_loss / len(train_loader):.3f}")
                    print(f"epoch {epoch} val {val_loss / len(val_loader):.3f}")


        def main():
            dist.init_process_group("nccl")
            model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[0])
            fit(model, torch.optim.SGD(model.parameters(), lr=0.1), train_set, val_set, dist.get_rank())


        if __name__ == "__main__":
            main()
    """
    # the validation loss over its shard is reported; the training loss is not
    assert _lines(lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP036"), "DDP036") == [24]


def test_a_continue_on_a_resumed_step_count_is_not_reported(tmp_path):
    text = NAN_SKIP.replace(
        "        for images, labels in loader:\n            loss = model(images, labels)\n"
        "            if torch.isnan(loss):\n",
        "        state = {\"epoch_step\": 0, \"running_loss\": 0.0}\n"
        "        for i_step, (images, labels) in enumerate(loader):\n            loss = model(images, labels)\n"
        "            state[\"running_loss\"] += loss.item()\n"
        "            if i_step < state[\"epoch_step\"]:\n")
    assert "i_step < state" in text
    assert _lines(lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP035"), "DDP035") == []


def test_a_path_join_is_not_ddps_join(tmp_path):
    body = """\
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("nccl")
        rank, world_size = dist.get_rank(), dist.get_world_size()
        model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[0])
        files = sorted(os.listdir(os.path.join("data", "train")))[rank::world_size]
        {loop}
            model(torch.load(path)).sum().backward()
    """
    plain = body.replace("{loop}", "for path in files:")
    joined = body.replace("{loop}", "with model.join():\n            for path in files:\n    ").replace(
        "            model(torch.load", "                model(torch.load")
    assert _lines(lint_project(tmp_path, {"train.py": plain}, "train.py", select="DDP034"), "DDP034") == [9]
    assert _lines(lint_project(tmp_path, {"train.py": joined}, "train.py", select="DDP034"), "DDP034") == []


def test_a_message_at_one_value_of_the_loop_variables_is_printed_once(tmp_path):
    text = """\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP


        def main():
            dist.init_process_group("nccl")
            model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[0])
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(args.start_epoch, 10):
                for i, x in enumerate(loader):
                    out = model(x)
                    if epoch == args.start_epoch and i == 0:
                        print("output shape", out.shape)
                    if i == 0 or epoch > 3:
                        print("first batch or late epoch")
                    if args.verbose and i == 0:
                        print("first batch of the epoch")
                    out.sum().backward()
                    optimizer.step()
            dist.destroy_process_group()


        if __name__ == "__main__":
            main()
    """
    # the `and` pins one step of both loops; the `or` pins nothing; `verbose and i == 0` pins the
    # step loop only, so it prints once per epoch
    assert _lines(lint_project(tmp_path, {"train.py": text}, "train.py", select="DDP020"), "DDP020") == [16, 18]
