"""Whether a job draws random numbers while it trains: dropout, random augmentation (also MONAI's `Rand...` transforms), random
tensors, Python's or NumPy's random draws, a shuffling DataLoader (not a sampler's order). Read from the code (comments
and docstrings left out) of the linted file and the project code it imports (a model class in `models/net.py` that holds
`nn.Dropout` counts; of a module imported by name, what the names reach: graph.reached_code). Seeding calls (`random.seed`, `np.random.seed`) are not draws, nor is a
synthetic set drawn inside `TensorDataset(...)`, nor the draws of a function of the linted file that builds the data set once (`trainset = build_fake_data(n)` outside any loop, handed to a DataLoader), nor the initialisation of parameters."""

from __future__ import annotations

import ast
import functools
import re
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.lint.model import api
from ddpcheck.lint.model.index import code_only

if TYPE_CHECKING:
    from ddpcheck.lint.model.module import CallSite
    from ddpcheck.lint.model.semantic import Model

# Dropout itself, in code (not in comments or docstrings).
_DROPOUT = re.compile(r"Dropout|\bdropout\w*\s*\(|\bdrop_?path|\bdrop_prob|dropout\w*\s*[:=]\s*0?\.\d*[1-9]")
# A library network loaded with its weights (`BertModel.from_pretrained(...)`,
# `timm.create_model(...)`): it trains with the dropout its configuration sets. A tokenizer's,
# configuration's or processor's `from_pretrained` loads no network and draws nothing.
_LIBRARY_NETWORK_PATTERN = (
    r"\b(?!\w*(?:Tokenizer(?:Fast)?|Config|Processor|Extractor)\b)\w+\.from_pretrained\s*\(|\btimm\.create_model\s*\(")
# Draws the model makes in the training process itself (dropout), whatever its DataLoader workers do.
_MODEL_DRAWS = re.compile(
    r"Dropout|\bdropout\w*\s*\(|\bdrop_?path|\bdrop_prob|dropout\w*\s*[:=]\s*0?\.\d*[1-9]"
    # Library models train with their own dropout (hidden_dropout_prob, drop_rate); one built
    # from a configuration (`AutoModelForCausalLM.from_config(config)`) may: a draw where the data
    # is sharded, not the dropout that alone reports a run with no sharding (`model_drops_out`).
    + "|" + _LIBRARY_NETWORK_PATTERN + r"|\b\w*Model\w*\.from_config\s*\("
    # The same built by calling a library head class on its configuration
    # (`GPT2LMHeadModel(config)`); not where a project defines such a class.
    r"|(?<!class )\b\w+(?:LMHeadModel|ForCausalLM|ForMaskedLM|ForConditionalGeneration)\s*\(\s*\w*config\b"
)
_DRAWS = re.compile(
    _MODEL_DRAWS.pattern
    # A sampler's order (`RandomSampler`, a dataset's own `shuffle=True`) is no per-sample draw:
    # the same seed gives the ranks the same order of their own shards, not the same augmentation.
    # MONAI's random transforms are spelled `Rand...` (`RandFlipd(...)`, `RandSpatialCropd(...)`).
    + r"|\bRandom(?!\w*Sampler\b)[A-Z]\w*\s*\(|\bRand(?!om)[A-Z]\w*\s*\(|\bRand(Augment|omErasing)|\b(Auto|TrivialAugment)\w*\(|\bmix_?up\b|\bcut_?mix\b"
    r"|\btorch\.(rand|randn|randint|randperm|rand_like|randn_like|randint_like|bernoulli|multinomial|normal|poisson)\s*\("
    r"|\.(normal_|uniform_|bernoulli_|random_|exponential_|cauchy_|geometric_|log_normal_)\s*\("
    r"|\b(np|numpy)\.random\.(?!seed\b|get_state\b|set_state\b)\w+"
    r"|\brandom\.(random|choice|choices|shuffle|randint|uniform|sample|gauss|randrange|normalvariate|betavariate)\s*\("
    # A DataLoader that shuffles by itself (no sampler): with the same seed every rank reads
    # the same batches.
    r"|\bDataLoader\s*\((?:[^()]|\([^()]*\))*\bshuffle\s*=\s*True"
)


# A DistributedSampler shuffles with its own generator, seeded alike on every rank by design
# (`seed + epoch`): its `shuffle=True` draws nothing from torch's global generator; nor does a
# draw given its own generator (`torch.randperm(n, generator=g)`).
_ARGS = r"\((?:[^()]|\([^()]*\))*\)"
_OWN_GENERATOR = re.compile(
    rf"\bDistributedSampler\s*{_ARGS}"
    rf"|\btorch\.(?:rand|randn|randint|randperm|bernoulli|multinomial|normal)\s*"
    r"\((?:[^()]|\([^()]*\))*\bgenerator\s*=(?:[^()]|\([^()]*\))*\)"
)
# A synthetic set drawn once to build the data (`TensorDataset(torch.randn(n, d), ...)`): with
# the same seed every rank builds the same set, which the sampler then shards, as it should.
_SYNTHETIC_SET = re.compile(rf"\bTensorDataset\s*{_ARGS}")
# Initialising parameters (`nn.init.normal_(module.weight, std=0.02)`,
# `self.weight.data.uniform_(-r, r)`, `nn.Parameter(torch.randn(1, n, d))`) draws once, before
# training; DDP then broadcasts rank 0's values: not a draw the ranks repeat alike while training.
_INITIALISATION = re.compile(
    rf"\b(?:torch\.)?(?:nn\.)?init\.\w+\s*{_ARGS}"
    rf"|\.(?:weight|bias)(?:\.data)?\.(?:normal_|uniform_|bernoulli_|random_)\s*{_ARGS}"
    rf"|\b(?:nn\.)?Parameter\s*{_ARGS}"
)
# `self.drop = nn.Dropout(p)` that no code calls (`self.drop(`): a layer that never draws.
_DROPOUT_LAYER = re.compile(r"self\.(\w+)\s*=\s*(?:nn\.|torch\.nn\.)?Dropout\d?d?\s*" + _ARGS)


_LIBRARY_NETWORK = re.compile(_LIBRARY_NETWORK_PATTERN)


# A project network with a `from_pretrained` of its own copies a library network's weights into
# itself: the network that trains is the project's.
_OWN_FROM_PRETRAINED = re.compile(r"\bdef\s+from_pretrained\b")


# Draws of random numbers (not augmentation classes, not dropout).
_NUMBER_DRAWS = re.compile(
    r"\btorch\.(rand|randn|randint|randperm|rand_like|randn_like|randint_like|bernoulli|multinomial|normal|poisson)\s*\("
    r"|\b(np|numpy)\.random\.(?!seed\b|get_state\b|set_state\b)\w+"
    r"|\brandom\.(random|choice|choices|shuffle|randint|uniform|sample|gauss|randrange|normalvariate|betavariate)\s*\("
)


def _without_dataset_construction(text: str) -> str:
    """`text` without the number draws of a dataset's constructor (a class with `__getitem__`
    whose `__init__` draws `self.X = torch.randn(n, d)`): the set is drawn once, the same on
    every rank, which the sampler then shards; what `__getitem__` draws per sample stays."""
    if "__getitem__" not in text:
        return text  # no dataset class (and no parse of the whole text to find none)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return text
    spans: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
        init = methods.get("__init__")
        if "__getitem__" in methods and init is not None and init.end_lineno is not None:
            spans.append((init.lineno, init.end_lineno))
    if not spans:
        return text
    lines = text.split("\n")
    for first, last in spans:
        for i in range(first - 1, min(last, len(lines))):
            lines[i] = _NUMBER_DRAWS.sub("", lines[i])
    return "\n".join(lines)


@functools.lru_cache(maxsize=256)  # the same project modules are reached from every script of a project
def _drawing_text(text: str) -> str:
    """`text` without the draws that leave torch's global generator alone."""
    text = _without_dataset_construction(text)
    text = _INITIALISATION.sub("", _SYNTHETIC_SET.sub("", _OWN_GENERATOR.sub("", text)))
    if _OWN_FROM_PRETRAINED.search(text):
        text = _LIBRARY_NETWORK.sub("", text)
    return _DROPOUT_LAYER.sub(lambda m: m.group(0) if f"self.{m.group(1)}(" in text else "", text)


_CLASS = re.compile(r"^\s*class\s+(\w+)", re.MULTILINE)


def _drawing_texts(model: Model) -> list[str]:
    """The code of the linted file and of the project modules it reaches, comments and
    docstrings left out, without the draws that leave torch's global generator alone. A project
    network loaded through its own `from_pretrained` (`VisionLanguageModel.from_pretrained(path)`,
    the class and its loader in another module) copies weights into the project's network."""
    root = model.root
    found = root.memo.get("drawing_texts")
    if found is None:
        texts = [code_only(text) for text in model.graph.reached_code(root)]
        single = _single_run_loaders(model)
        if single:
            # The linted file's own text loses the loaders only its single-process run builds.
            own_text = code_only(root.source)
            texts = [_without(text, single) if text == own_text else text for text in texts]
        builders = _data_builders(model)
        if builders:
            # ... and the number draws of its functions that build the data set once.
            own_text = code_only(root.source)
            texts = [_drawn_once(text, builders) if text == own_text else text for text in texts]
        own: set[str] = set()
        if any(_OWN_FROM_PRETRAINED.search(text) for text in texts):
            own = {name for text in texts for name in _CLASS.findall(text)}
        if own:
            loaded = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, own))) + r")\.from_pretrained\s*\(")
            texts = [loaded.sub("", text) for text in texts]
        found = [_drawing_text(text) for text in texts]
        root.memo["drawing_texts"] = found
    return list(found)


def _single_run_loaders(model: Model) -> list[str]:
    """The code of the linted file's DataLoader calls that only a run without the process group
    makes (the `else` of `if use_ddp:`, where the distributed arm builds its loader with a
    DistributedSampler): a `shuffle=True` there draws nothing in the distributed job. A library
    loader derived from torch's (`torch_geometric.loader.DataLoader`) is one too."""
    root = model.root
    found: list[str] = []
    for call in root.calls:
        if model.makes(call, api.DATALOADER) and model.paths.single_only(call) is not None:
            found.append(root.code(call.node))
    return found


def _data_builders(model: Model) -> list[str]:
    """The code (comments left out) of the linted file's functions that build a data set once:
    every call of the function is made outside any loop and binds a name that a DataLoader or a
    Dataset of the same scope is given (`trainset = build_fake_data(size=10000)`, then
    `DataLoader(trainset, sampler=...)`). Its draws make the set, the same on every rank that
    seeds alike, which the sampler then shards: no draw while training."""
    root = model.root
    out: list[str] = []
    for name, node in root.functions.items():
        if "." in name:
            continue
        calls = [c for c in root.calls if isinstance(c.node.func, cst.Name) and c.node.func.value == name]
        if not calls or any(c.loops or not _feeds_a_loader(model, c) for c in calls):
            continue
        out.append(code_only(root.code(node)))
    return out


def _feeds_a_loader(model: Model, site: CallSite) -> bool:
    """The call's answer is bound to a name handed first to a DataLoader or a Dataset in the
    same scope."""
    bound = {n for n, values in site.scope.assignments.items() if any(v is site.node for v in values)}
    if not bound:
        return False
    for call in site.module.calls_in(site.scope.qualname):
        if call.scope is not site.scope:
            continue
        first = call.arg("dataset", 0)
        if isinstance(first, cst.Name) and first.value in bound and (
                model.makes(call, api.DATALOADER) or model.makes(call, api.DATASET)
                or (model.api(call) or "").startswith("torch.utils.data.")):
            return True
    return False


def _drawn_once(text: str, codes: list[str]) -> str:
    for code in codes:
        if code in text:
            text = text.replace(code, _NUMBER_DRAWS.sub("", code))
    return text


def _without(text: str, codes: list[str]) -> str:
    # A call whose code holds a comment is not found in the comment-free text: it stays a draw.
    for code in codes:
        text = text.replace(code, "")
    return text


def draws_random(model: Model) -> bool:
    """Whether the linted file, or a project module it imports, draws random numbers."""
    root = model.root
    found = root.memo.get("draws_random")
    if found is None:
        # Comments and docstrings draw nothing (a commented-out smoke test's `torch.randn(...)`).
        found = any(_DRAWS.search(text) is not None for text in _drawing_texts(model))
        root.memo["draws_random"] = found
    return bool(found)


def model_draws_random(model: Model) -> bool:
    """Whether the model trained by the linted file draws random numbers itself (dropout), read
    like `draws_random`: what stays alike on every rank when only the DataLoader workers are
    seeded per rank."""
    root = model.root
    found = root.memo.get("model_draws_random")
    if found is None:
        found = any(_MODEL_DRAWS.search(text) is not None for text in _drawing_texts(model))
        root.memo["model_draws_random"] = found
    return bool(found)


def model_drops_out(model: Model) -> bool:
    """Whether the code of the linted file or of a project module it imports (comments and
    docstrings left out) builds or calls dropout, or loads a library network that does: the
    draw the model itself makes, the same on every rank that seeds alike."""
    root = model.root
    found = root.memo.get("model_drops_out")
    if found is None:
        found = any(_DROPOUT.search(text) is not None or _LIBRARY_NETWORK.search(text) is not None
                    for text in _drawing_texts(model))
        root.memo["model_drops_out"] = found
    return bool(found)
