"""The APIs rules know, by canonical qualified name — torch's, and other collective libraries'.

Rules compare resolved names (ddpcheck/lint/model/resolve.py turns `DS`, `tud.DistributedSampler`,
`torch.utils.data.distributed.DistributedSampler` or a re-export through a project module into
`torch.utils.data.DistributedSampler`), never the spelling of a name. This module is the only
place those names are written.
"""

from __future__ import annotations

import re

# --- torch.nn.parallel ---------------------------------------------------------------------------
DDP = "torch.nn.parallel.DistributedDataParallel"
DATA_PARALLEL = "torch.nn.parallel.DataParallel"
# NVIDIA apex mixed precision: refuses a model already inside a DDP or DataParallel wrapper.
APEX_AMP_INITIALIZE = "apex.amp.initialize"
MODULE_BASE = "torch.nn.Module"

# --- torch.utils.data ----------------------------------------------------------------------------
DATALOADER = "torch.utils.data.DataLoader"
DISTRIBUTED_SAMPLER = "torch.utils.data.DistributedSampler"
SAMPLER = "torch.utils.data.Sampler"
BATCH_SAMPLER = "torch.utils.data.BatchSampler"
ITERABLE_DATASET = "torch.utils.data.IterableDataset"
DATASET = "torch.utils.data.Dataset"
# Classes of other libraries derived from a torch class that hand their options on to its
# constructor: the torch class, and how many leading positional parameters they share with it
# (past those, only keywords reach torch's constructor). Read from each library's source.
DERIVED_CLASSES: dict[str, tuple[str, int]] = {
    # PyG: (dataset, batch_size=1, shuffle=False, ..., **kwargs) -> DataLoader(..., **kwargs);
    # torch_geometric.data.DataLoader is the deprecated alias of the same class.
    "torch_geometric.loader.DataLoader": ("torch.utils.data.DataLoader", 3),
    "torch_geometric.loader.DataListLoader": ("torch.utils.data.DataLoader", 3),
    "torch_geometric.loader.DenseDataLoader": ("torch.utils.data.DataLoader", 3),
    "torch_geometric.data.DataLoader": ("torch.utils.data.DataLoader", 3),
    "torch_geometric.data.DataListLoader": ("torch.utils.data.DataLoader", 3),
    "torch_geometric.data.DenseDataLoader": ("torch.utils.data.DataLoader", 3),
    # MONAI: DataLoader(dataset, num_workers=0, **kwargs) and DistributedSampler(dataset,
    # even_divisible=True, num_replicas=None, rank=None, shuffle=True, **kwargs), which hand
    # their options to torch's by keyword.
    "monai.data.DataLoader": ("torch.utils.data.DataLoader", 1),
    "monai.data.dataloader.DataLoader": ("torch.utils.data.DataLoader", 1),
    "monai.data.DistributedSampler": ("torch.utils.data.DistributedSampler", 1),
    "monai.data.samplers.DistributedSampler": ("torch.utils.data.DistributedSampler", 1),
}
# Parameters of a derived sampler that turn its padding off when false, with their position:
# MONAI's `even_divisible=False` keeps each rank's own share without repeating samples.
UNPADDED_WHEN_FALSE: dict[str, tuple[str, int]] = {
    "monai.data.DistributedSampler": ("even_divisible", 1),
    "monai.data.samplers.DistributedSampler": ("even_divisible", 1),
}
# Library samplers that split the dataset between the ranks and pad every shard to the same length
# by repeating samples, with no option to turn that off: timm's OrderedDistributedSampler
# (`indices += indices[:(self.total_size - len(indices))]`, then `indices[rank::num_replicas]`;
# exported by `timm.data` and imported into `timm.data.loader`). Read from timm's source.
PADDING_SAMPLERS = frozenset({
    "timm.data.OrderedDistributedSampler",
    "timm.data.loader.OrderedDistributedSampler",
    "timm.data.distributed_sampler.OrderedDistributedSampler",
})
# Samplers that draw from the whole dataset on every rank.
LOCAL_SAMPLERS = frozenset({
    "torch.utils.data.RandomSampler",
    "torch.utils.data.SequentialSampler",
    "torch.utils.data.SubsetRandomSampler",
    "torch.utils.data.WeightedRandomSampler",
})

# --- torch.distributed ---------------------------------------------------------------------------
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
DESTROY_PROCESS_GROUP = "torch.distributed.destroy_process_group"
GET_RANK = "torch.distributed.get_rank"
GET_WORLD_SIZE = "torch.distributed.get_world_size"
GLOBAL_RANK_CALLS = frozenset({GET_RANK, "torch.distributed.get_global_rank"})
LOCAL_RANK_CALLS = frozenset({"torch.distributed.get_node_local_rank"})
WORLD_SIZE_CALLS = frozenset({GET_WORLD_SIZE, "torch.cuda.device_count", "torch.accelerator.device_count"})
IS_INITIALIZED = frozenset({"torch.distributed.is_initialized", "torch.distributed.is_available"})
REDUCE_OP = "torch.distributed.ReduceOp"

_TORCH_COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "barrier", "monitored_barrier", "broadcast",
    "broadcast_object_list", "all_gather", "all_gather_object", "all_gather_into_tensor",
    "all_gather_coalesced", "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather",
    "gather_object", "scatter", "scatter_object_list", "all_to_all", "all_to_all_single",
    "new_group",
)
# Calls every rank of the group must make, in the same order, or the others wait forever.
COLLECTIVES = frozenset("torch.distributed." + n for n in _TORCH_COLLECTIVES)
BARRIERS = frozenset({"torch.distributed.barrier", "torch.distributed.monitored_barrier"})
SUM_REDUCTIONS = frozenset({"torch.distributed.all_reduce", "torch.distributed.reduce"})
GATHERS = frozenset({
    "torch.distributed.all_gather", "torch.distributed.all_gather_object",
    "torch.distributed.all_gather_into_tensor", "torch.distributed.gather",
    "torch.distributed.gather_object",
})
# Collectives that hand each rank its own piece of the source rank's data.
SCATTER_OBJECT_LIST = "torch.distributed.scatter_object_list"
SCATTERS = frozenset({"torch.distributed.scatter", SCATTER_OBJECT_LIST})

# mpi4py: `MPI.COMM_WORLD.bcast(...)` blocks until every rank of the communicator joins.
MPI_COMM_WORLD = "mpi4py.MPI.COMM_WORLD"
MPI_COLLECTIVE_METHODS = frozenset({
    "bcast", "Bcast", "allreduce", "Allreduce", "reduce", "Reduce", "gather", "Gather", "Gatherv",
    "allgather", "Allgather", "Allgatherv", "scatter", "Scatter", "Scatterv", "alltoall",
    "Alltoall", "Alltoallv", "barrier", "Barrier", "Reduce_scatter", "Scan", "scan", "Exscan",
})
# Horovod's torch API: the same contract.
HOROVOD_COLLECTIVES = frozenset(
    "horovod.torch." + n for n in (
        "allreduce", "allreduce_", "allgather", "allgather_object", "broadcast", "broadcast_",
        "broadcast_object", "broadcast_parameters", "broadcast_optimizer_state", "alltoall",
        "barrier", "join",
    )
)

# --- devices -------------------------------------------------------------------------------------
SET_DEVICE = frozenset({
    "torch.cuda.set_device", "torch.accelerator.set_device_index", "torch.accelerator.set_device_idx",
    "torch.xpu.set_device",
})
DEVICE_CONTEXTS = frozenset({"torch.cuda.device", "torch.accelerator.device_index"})
TORCH_DEVICE = "torch.device"
CURRENT_ACCELERATOR = "torch.accelerator.current_accelerator"
DEFAULT_BACKEND_FOR_DEVICE = "torch.distributed.get_default_backend_for_device"

# --- checkpoints ---------------------------------------------------------------------------------
SAVE = "torch.save"
JIT_SAVE = "torch.jit.save"
JIT_MAKERS = frozenset({"torch.jit.script", "torch.jit.trace"})
LOAD = "torch.load"
CONSUME_PREFIX = "torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"

# --- processes and launchers ---------------------------------------------------------------------
SPAWN = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})
# Builders of another training engine: the loader, backward and steps of a function that hands its
# model to one are that engine's (its own sampler, accumulation and all-reduce), not DDP's.
ENGINE_BUILDERS = frozenset({"deepspeed.initialize"})
PROCESS_STARTERS = SPAWN | frozenset({
    "torch.multiprocessing.spawn.spawn", "multiprocessing.Process", "torch.multiprocessing.Process",
})
LAUNCH_MODULE = "torch.distributed.launch"
LAUNCHER_ENV = frozenset({"LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})
RENDEZVOUS_ENV = frozenset({"MASTER_ADDR", "MASTER_PORT"})
GLOBAL_RANK_ENV = frozenset({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
LOCAL_RANK_ENV = frozenset({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"})
RANK_ENV = GLOBAL_RANK_ENV | LOCAL_RANK_ENV
WORLD_SIZE_ENV = frozenset({"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
ENVIRON = "os.environ"
ENV_GETTERS = frozenset({"os.environ.get", "os.getenv", "os.environ.setdefault"})
RUNS_COMMANDS = ("subprocess.", "os.system", "os.popen", "os.exec", "os.spawn")
RUN_MODULE = "runpy.run_module"
MPI_RANK_METHODS = frozenset({"Get_rank", "rank"})

# --- nn and optim --------------------------------------------------------------------------------
SYNC_BATCHNORM = "torch.nn.SyncBatchNorm"
CONVERT_SYNC_BATCHNORM = "torch.nn.SyncBatchNorm.convert_sync_batchnorm"
COMPILE = "torch.compile"
# Dicts whose entries are read as attributes (`cfg = EasyDict({"lr": 1e-3})`, then `cfg.lr`), and
# namespaces made from keywords (`SimpleNamespace(lr=1e-3)`).
ATTRIBUTE_DICTS = frozenset({"easydict.EasyDict", "addict.Dict", "addict.addict.Dict", "munch.Munch", "munch.munchify",
                             "attrdict.AttrDict", "ml_collections.ConfigDict", "types.SimpleNamespace",
                             "argparse.Namespace"})
# The class names such dicts go by in the many small packages that ship one (`nincore.AttrDict`,
# `utils.DotDict` of an installed toolkit): an outside class so named reads the same way.
_ATTRIBUTE_DICT_NAMES = frozenset({"AttrDict", "EasyDict", "DotDict", "AttributeDict", "Munch"})


def is_attribute_dict(name: str | None) -> bool:
    """`name` (an outside class's canonical name) is a dict whose entries are read as attributes."""
    return name is not None and (name in ATTRIBUTE_DICTS or name.rsplit(".", 1)[-1] in _ATTRIBUTE_DICT_NAMES)
BATCHNORMS = frozenset(
    f"torch.nn.{lazy}BatchNorm{d}d" for lazy in ("", "Lazy") for d in (1, 2, 3)
) | frozenset({
    # PyTorch Geometric's BatchNorm holds a torch.nn.BatchNorm1d (`self.module`), which
    # convert_sync_batchnorm replaces like any other.
    "torch_geometric.nn.BatchNorm", "torch_geometric.nn.norm.BatchNorm",
    "torch_geometric.nn.norm.batch_norm.BatchNorm",
})
# mmcv's norm-layer builder and the config types it builds as torch BatchNorm.
MMCV_NORM_BUILDERS = frozenset({"mmcv.cnn.build_norm_layer", "mmcv.cnn.bricks.build_norm_layer",
                                "mmcv.cnn.bricks.norm.build_norm_layer"})
MMCV_BATCHNORM_TYPES = frozenset({"BN", "BN1d", "BN2d", "BN3d"})
# torch.nn layers that own parameters (`nn.ReLU`, `nn.Dropout`, pooling and the like own none),
# and parameters themselves.
_PARAMETER_LAYER = re.compile(
    r"^torch\.nn\.(Lazy)?(Linear|Bilinear|Conv\w*|ConvTranspose\w*|Embedding\w*|RNN|LSTM|GRU|RNNCell|LSTMCell"
    r"|GRUCell|(?!LocalResponse)\w*Norm(\dd)?|MultiheadAttention|Transformer\w*|PReLU)$"
)
PARAMETERS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


def owns_parameters(name: str) -> bool:
    """Whether the torch API `name` builds a layer with parameters, or is a parameter."""
    return name in PARAMETERS or _PARAMETER_LAYER.match(name) is not None


OPTIMIZER_BASE = "torch.optim.Optimizer"
ZERO_OPTIMIZER = "torch.distributed.optim.ZeroRedundancyOptimizer"
GRAD_SCALERS = frozenset({"torch.amp.GradScaler", "torch.cuda.amp.GradScaler"})
NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"})
# torchvision constructors of models made with BatchNorm layers.
BATCHNORM_MODEL_PREFIXES = tuple(
    "torchvision.models." + n for n in (
        "resnet", "resnext", "wide_resnet", "densenet", "mobilenet", "efficientnet", "regnet",
        "inception", "googlenet", "shufflenet", "mnasnet",
    )
)

# Hugging Face transformers' PyTorch vision networks made of convolutions with BatchNorm (their
# ViT, Swin, ConvNeXt and the like use LayerNorm; BiT uses GroupNorm). SegFormer's and UperNet's
# segmentation heads fuse their features through a BatchNorm2d (SegFormer's encoder alone,
# `SegformerModel`, has none).
TRANSFORMERS_BATCHNORM_NETWORK = re.compile(
    r"(?:ResNet|RegNet|MobileNetV1|MobileNetV2|EfficientNet)"
    r"(?:Model|ForImageClassification|Backbone|ForSemanticSegmentation)"
    r"|(?:Segformer|UperNet)ForSemanticSegmentation")

# Model factories that build a network from its name: `get_model("resnet50")`,
# `timm.create_model("efficientnet_b0")`.
MODEL_BY_NAME = frozenset({"torchvision.models.get_model", "timm.create_model", "timm.models.create_model"})
# timm model families whose default layers are BatchNorm ("resnetv2" is not: BiT's use GroupNorm).
TIMM_BATCHNORM_FAMILIES = (
    "resnet", "resnext", "seresnet", "seresnext", "wide_resnet", "ecaresnet", "resnetrs", "res2net",
    "resnest", "densenet", "efficientnet", "tf_efficientnet", "mobilenetv2", "mobilenetv3",
    "tf_mobilenetv3", "mnasnet", "regnetx", "regnety", "dla", "dpn", "ghostnet", "hrnet",
    "inception_v3", "xception", "rexnet",
)

# Methods every `torch.nn.Module` has: calling one on a project network needs no look inside it.
MODULE_METHODS = frozenset({
    "parameters", "named_parameters", "state_dict", "load_state_dict", "train", "eval", "to", "cuda",
    "cpu", "half", "float", "double", "bfloat16", "zero_grad", "modules", "named_modules", "children",
    "named_children", "apply", "buffers", "named_buffers", "requires_grad_", "register_buffer",
    "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
    "register_parameter", "add_module", "get_parameter", "get_submodule", "get_buffer", "extra_repr",
    "type", "share_memory",
})

# Outside functions that run a forward pass of the module they are handed (a model summary, a
# FLOP count): the module's parameter (name, position), and the input parameters of which one
# must be given for the forward to run (torchinfo only prints the layers without one).
FORWARDS_MODULE: dict[str, tuple[tuple[str, int], tuple[tuple[str, int], ...]]] = {
    "torchsummary.summary": (("model", 0), (("input_size", 1),)),
    "torchsummary.torchsummary.summary": (("model", 0), (("input_size", 1),)),
    "torchinfo.summary": (("model", 0), (("input_size", 1), ("input_data", 2))),
    "thop.profile": (("model", 0), (("inputs", 1),)),
    "ptflops.get_model_complexity_info": (("model", 0), (("input_res", 1),)),
}

PRINT = "print"
# Command-line binders that turn a function's parameters into options (`fire.Fire(main)`).
CLI_BINDERS = frozenset({"fire.Fire", "typer.run", "jsonargparse.CLI", "jsonargparse.auto_cli", "defopt.run"})
TQDM = frozenset({"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm", "tqdm"})

# Deep module paths users may import from, mapped to the public name rules match on.
_CANONICAL_PREFIXES = (
    ("torch.utils.data.distributed.", "torch.utils.data."),
    ("torch.utils.data.dataloader.", "torch.utils.data."),
    ("torch.utils.data.dataset.", "torch.utils.data."),
    ("torch.utils.data.sampler.", "torch.utils.data."),
    ("torch.nn.parallel.distributed.", "torch.nn.parallel."),
    ("torch.nn.parallel.data_parallel.", "torch.nn.parallel."),
    ("torch.distributed.distributed_c10d.", "torch.distributed."),
    ("torch.nn.modules.batchnorm.", "torch.nn."),
    ("torch.nn.modules.module.", "torch.nn."),
    ("torch.cuda.amp.", "torch.amp."),
    ("torch.multiprocessing.spawn.", "torch.multiprocessing."),
    ("torch.amp.grad_scaler.", "torch.amp."),
    # HFAI's NCCL module is a drop-in torch.distributed (the same functions, same signatures),
    # imported in its place: `import hfai.nccl.distributed as dist`.
    ("hfai.nccl.distributed.", "torch.distributed."),
)
_CANONICAL_NAMES = {
    "torch.nn.DataParallel": DATA_PARALLEL,
    "torch.nn.parallel.DistributedDataParallel": DDP,
    "torch.nn.parallel.distributed.DistributedDataParallel": DDP,
    "torch.multiprocessing.spawn.spawn": "torch.multiprocessing.spawn",
    "torch.multiprocessing.spawn.start_processes": "torch.multiprocessing.start_processes",
}
_OPTIMIZER_SKIP = frozenset({"torch.optim.Optimizer", "torch.optim.lr_scheduler"})


def canonical(name: str) -> str:
    """The public spelling of an API name reached through a deeper module path."""
    while name.startswith("torch.torch."):
        name = name[6:]  # the torch module holds itself as an attribute: `torch.torch.cuda` is torch.cuda
    exact = _CANONICAL_NAMES.get(name)
    if exact is not None:
        return exact
    for deep, public in _CANONICAL_PREFIXES:
        if name.startswith(deep):
            name = public + name[len(deep):]
            break
    if name.startswith("torch.optim.") and name.count(".") == 3:
        # torch.optim.sgd.SGD -> torch.optim.SGD
        parts = name.split(".")
        if parts[2].islower() and parts[3][:1].isupper() and parts[2] not in ("lr_scheduler", "swa_utils"):
            name = "torch.optim." + parts[3]
    return _CANONICAL_NAMES.get(name, name)


# Optimizer classes of other libraries built like torch's (`Opt(params, lr=...)`, stepped with
# `.step()`): Hugging Face's AdamW, bitsandbytes' 8-bit Adam, apex's fused optimizers.
LIBRARY_OPTIMIZERS = frozenset({
    "transformers.AdamW", "transformers.optimization.AdamW",
    "bitsandbytes.optim.Adam8bit", "bitsandbytes.optim.AdamW8bit", "bitsandbytes.optim.PagedAdamW8bit",
    "apex.optimizers.FusedAdam", "apex.optimizers.FusedSGD", "apex.optimizers.FusedLAMB",
})


def is_optimizer(qualname: str | None) -> bool:
    """A torch optimizer class (`torch.optim.SGD`, `torch.optim.AdamW`, ZeRO), or one of another
    library built the same way (LIBRARY_OPTIMIZERS)."""
    if qualname is None:
        return False
    if qualname == ZERO_OPTIMIZER or qualname in LIBRARY_OPTIMIZERS:
        return True
    return (
        qualname.startswith("torch.optim.") and qualname.count(".") == 2
        and qualname[12:13].isupper() and qualname not in _OPTIMIZER_SKIP
    )


def is_collective(qualname: str | None) -> bool:
    return qualname is not None and (qualname in COLLECTIVES or qualname in HOROVOD_COLLECTIVES or (
        qualname.startswith(MPI_COMM_WORLD + ".") and qualname.rsplit(".", 1)[1] in MPI_COLLECTIVE_METHODS
    ))


def _known_names() -> frozenset[str]:
    names: set[str] = set()
    for value in list(globals().values()):
        if isinstance(value, str) and "." in value:
            names.add(value)
        elif isinstance(value, frozenset):
            names |= {v for v in value if isinstance(v, str) and "." in v}
    names |= {f"torch.utils.data.{n}" for n in ("Dataset", "TensorDataset", "Subset", "ConcatDataset")}
    return frozenset(names)


# Every API name above: what `from torch.utils.data import *` is taken to provide.
KNOWN = _known_names()


def shared_positions(qualname: str | None) -> int | None:
    """How many leading positional parameters an outside class derived from a torch class
    shares with it (None: a torch class itself, or not known as derived)."""
    found = DERIVED_CLASSES.get(qualname) if qualname is not None else None
    return found[1] if found is not None else None


def derived_from(qualname: str | None) -> str | None:
    """The torch class an outside library's class derives from and hands its options on to
    (`torch_geometric.loader.DataLoader` -> torch.utils.data.DataLoader), None when not known."""
    found = DERIVED_CLASSES.get(qualname) if qualname is not None else None
    return found[0] if found is not None else None
