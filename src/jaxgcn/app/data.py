"""THE data of a job, as a typed request: which graph (a catalogue dataset, one of the other
``--dataset`` forms, your own files, a synthetic graph, partition files), which split (the
dataset's protocol, Planetoid-style random splits, a split file, fractions) and how it is prepared.

:class:`DataRequest` looks the catalogue entry up once and carries it (``entry``); :func:`read`
reads the graph with the split decided up front, :func:`load` prepares it with the split(s) drawn
after preparation. ``jaxgcn train``, ``sweep``, ``info``, ``partition``, ``evaluate`` and
``predict`` all start here (:mod:`jaxgcn.cli.data` only builds the request from the flags), so a
library caller who builds the same request gets the same data.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from jaxgcn.datasets import Prepared, RawGraph, load_dataset, split_codes, with_random_splits, with_splits
from jaxgcn.datasets.loading import clean, lay_out
from jaxgcn.datasets.base import check_own_files
from jaxgcn.datasets.catalogue import SEVERAL_SPLIT_PROTOCOLS, Dataset, lookup
from jaxgcn.datasets.download import data_root as default_root
from jaxgcn.datasets.files import load_files
from jaxgcn.datasets.named import protocol_info, protocol_name, protocol_splits
from jaxgcn.datasets.parsed import cache_file, cached
from jaxgcn.host.machine import REORDER_MIN_NODES
from jaxgcn.host.memory import MemoryEstimate, estimate
from jaxgcn.core.models import Execution
from jaxgcn.plan import backend_for, concrete, current_platform, layer_rows, layout_facts, with_first_layer
from jaxgcn.datasets.stats import edge_count
from jaxgcn.datasets.splits import fraction_split, planetoid_split, read_split_file, split_table

Say = Callable[[str], None]  # where notes go as they happen (print, or nothing)
PARTITIONED = "partitioned:"  # --dataset partitioned:DIR (written by `jaxgcn partition`)


@dataclasses.dataclass(frozen=True)
class DataRequest:
    """The graph, its split and its preparation.

    Attributes:
        dataset: a catalogue name or another ``--dataset`` form (``ogb:DIR``, ``npz:FILE``,
            ``synthetic``, ``partitioned:DIR``); ignored when ``edges`` is given.
        edges, features, labels: your own files (``features`` is a feature count for ``synthetic``).
        data_dir, ogb_split, data_root, progress: where and how a dataset is read or downloaded.
        synthetic: :func:`jaxgcn.datasets.synthetic`'s ``n_nodes``, ``n_classes``, ``avg_degree``,
            ``homophily`` (its defaults where not given).
        split: ``"public"`` (the dataset's own split or protocol) or ``"random"`` (Planetoid-style).
        splits: how many splits (of the protocol, or random ones: split k drawn with ``data_seed + k``).
        split_file, train_frac, val_frac, test_frac: a split decided up front (a file; fractions).
        per_class, n_val, n_test: the sizes of a Planetoid-style split.
        norm, feature_norm, symmetrize, reorder: the preparation (:func:`jaxgcn.datasets.prepare`).
        entry: the catalogue row of ``dataset`` (looked up once, here), or None.

    >>> DataRequest("Amazon_Photo").entry.name, DataRequest("amazon-photo").protocol
    ('amazon-photo', 'per-class-20-30')
    >>> DataRequest("amazon-photo", split="random").protocol, DataRequest("npz:graph.npz").source
    (None, 'named')
    """

    dataset: str = "cora"
    edges: Path | None = None
    features: Any = None
    labels: Path | None = None
    data_dir: Path | None = None
    ogb_split: str | None = None
    data_root: Path | None = None
    progress: bool = True
    synthetic: dict[str, Any] = dataclasses.field(default_factory=dict)
    split: str = "public"
    splits: int = 1
    split_file: Path | None = None
    train_frac: float | None = None
    val_frac: float | None = None
    test_frac: float | None = None
    per_class: int = 20
    n_val: int = 500
    n_test: int = 1000
    data_seed: int = 0
    norm: str = "sym"
    feature_norm: str = "row"
    symmetrize: bool = True
    reorder: str = "auto"
    entry: Dataset | None = dataclasses.field(init=False, default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entry", None if self.edges is not None else lookup(self.dataset))

    @property
    def source(self) -> str:
        """``files``, ``partitions``, ``synthetic`` or ``named`` (every other ``--dataset`` form)."""
        if self.edges is not None:
            return "files"
        if self.dataset.startswith(PARTITIONED):
            return "partitions"
        return "synthetic" if self.dataset == "synthetic" else "named"

    @property
    def split_given(self) -> bool:
        """Whether the split is decided before preparation: own files, a split file or fractions."""
        return self.edges is not None or self.split_file is not None or self.train_frac is not None

    @property
    def random_splits(self) -> bool:
        """Whether Planetoid-style random splits are drawn after preparation (split k with seed
        ``data_seed + k``): ``split="random"`` on a dataset, or several splits of own files (whose
        one split :func:`read` draws up front)."""
        if self.split_file is not None or self.train_frac is not None:
            return False
        return self.split == "random" if self.edges is None else self.splits > 1

    @property
    def drawn_by_reader(self) -> bool:
        """Whether the reader draws a Planetoid-style random split (seed ``data_seed``, sized by
        ``per_class``, ``n_val``, ``n_test``) because the data holds none: ``npz:DIR`` without
        ``splits.npz``, no split asked for."""
        if self.source != "named" or not self.dataset.lower().startswith("npz:") or self.split != "public":
            return False
        return not self.split_given and not (Path(self.dataset[4:]).expanduser() / "splits.npz").is_file()

    @property
    def protocol(self) -> str | None:
        """The catalogue dataset's protocol when ITS splits are used (``split="public"``, no split
        given), else None."""
        if self.entry is None or self.split != "public" or self.data_dir is not None or self.split_given:
            return None
        return self.entry.protocol

    @property
    def several_protocol_splits(self) -> bool:
        """Whether ``splits`` picks several of the protocol's own splits (Shchur et al.'s per-class
        random splits, WikiCS's official ones)."""
        return self.protocol in SEVERAL_SPLIT_PROTOCOLS

    def fractions(self) -> tuple[float, float, float]:
        """train/val/test fractions (val 0.1 and test 0.2 unless given)."""
        return (float(self.train_frac), 0.1 if self.val_frac is None else self.val_frac,
                0.2 if self.test_frac is None else self.test_frac)

    def split_name(self) -> str:
        """What the reports say about a split decided up front (a dataset's own split is "public")."""
        if self.split_file is not None:
            return f"file {self.split_file}"
        if self.train_frac is not None:
            train, val, test = self.fractions()
            return f"fractions {train:g}/{val:g}/{test:g} (seed {self.data_seed})"
        return f"random (seed {self.data_seed})"

    def where(self) -> str:
        """The flag that named the labels, for messages."""
        return f"--labels {self.labels}" if self.edges is not None else f"--dataset {self.dataset}"


class Loaded(NamedTuple):
    """A prepared dataset and the input's node ids (None: the nodes are numbered 0..n-1)."""

    prepared: Prepared
    node_ids: np.ndarray | None


def _read_graph(request: DataRequest, require_labels: bool) -> RawGraph:
    """The graph as read: own files or a named dataset."""
    r = request
    if r.edges is not None:
        if require_labels and r.labels is None:
            raise ValueError("--labels FILE is needed with --edges: a CSV node,label (or, for several labels per "
                             "node, node,labels or node,<label1>,<label2>,...)")
        paths = [Path(p) for p in (r.edges, r.features, r.labels) if p is not None]

        def parse() -> RawGraph:
            return load_files(r.edges, r.features, r.labels)
        return cached(cache_file(default_root(r.data_root), "files", paths), paths, parse)
    check_own_files(r.edges, r.labels, r.features)
    return load_dataset(r.dataset, data_dir=r.data_dir, ogb_split=r.ogb_split, data_root=r.data_root,
                        progress=r.progress, **r.synthetic, n_features=int(r.features or 64),
                        train_per_class=r.per_class, n_val=r.n_val, n_test=r.n_test, seed=r.data_seed)


def planetoid_splits(request: DataRequest, raw: RawGraph) -> dict[str, np.ndarray]:
    """One Planetoid-style random split of ``raw`` as ``request`` sizes it (seed ``data_seed``)."""
    return planetoid_split(raw.labels, per_class=request.per_class, n_val=request.n_val, n_test=request.n_test,
                           seed=request.data_seed, class_names=raw.class_names)


def read(request: DataRequest, require_labels: bool = True, split: bool = True) -> RawGraph:
    """The graph ``request`` names, with the split it asks for when that is decided up front
    (``split=False``: as read, for a split taken from elsewhere)."""
    raw = _read_graph(request, require_labels)
    if not split or not request.split_given:
        return raw
    ids = raw.node_ids if raw.node_ids is not None else np.arange(raw.labels.size).astype(str)
    if request.split_file is not None:
        splits = read_split_file(request.split_file, ids)
    elif request.train_frac is not None:
        splits = fraction_split(raw.labels, *request.fractions(), seed=request.data_seed)
    else:
        splits = planetoid_splits(request, raw)
    return raw._replace(splits=splits)


def require_two_classes(request: DataRequest, prepared: Prepared) -> None:
    """One class makes every prediction right by construction (accuracy 1.0): refuse it. Several
    labels per node need one label with both a positive and a negative node (else no ROC-AUC exists)."""
    labels = np.asarray(prepared.data.labels)
    if labels.ndim == 2:
        both = np.any(np.nansum(labels, axis=0) > 0) and np.any(np.nansum(1.0 - labels, axis=0) > 0)
        if not both:
            raise ValueError(f"{request.where()}: every present target of the {labels.shape[1]} labels is "
                             f"{'1' if np.nansum(labels) > 0 else '0 (or missing)'}; a multi-label task needs "
                             "positive and negative targets: check the labels")
        return
    present = np.unique(labels[labels >= 0])
    if present.size >= 2:
        return
    names = prepared.info.get("class_names")
    if present.size == 0:
        raise ValueError(f"{request.where()}: no node has a label; training needs labelled nodes of at least 2 "
                         "classes")
    name = names[present[0]] if names else str(present[0])
    raise ValueError(f"{request.where()}: all {int(np.sum(labels >= 0))} labelled nodes are in one class ({name}); a "
                     "classifier needs at least 2 classes (with one, accuracy is 1.0 by construction): check the "
                     "labels")


def _with_split(request: DataRequest, prepared: Prepared,
                protocol: list[dict[str, np.ndarray]] | None = None) -> Prepared:
    """Random splits drawn after preparation (stacked when several), the dataset protocol's splits
    (``protocol``, in the input's numbering), and the split's name in ``info``."""
    if protocol is not None:
        return with_splits(prepared, protocol, protocol_name(request.protocol, request.splits, request.data_seed))
    if request.random_splits:
        prepared = with_random_splits(prepared, np.asarray(prepared.data.labels), request.splits,
                                      per_class=request.per_class, n_val=request.n_val, n_test=request.n_test,
                                      seed=request.data_seed)
        if request.splits > 1:
            return prepared
    elif request.drawn_by_reader:
        name = f"random (seed {request.data_seed}; {request.dataset} has no splits.npz)"
        return prepared._replace(info={**prepared.info, "split": name})
    elif not request.split_given:
        return prepared
    return prepared._replace(info={**prepared.info, "split": request.split_name()})


def _summary(prepared: Prepared, seconds: float) -> str:
    info = prepared.info
    sizes = info.get("split_sizes") or {}
    counts = ": " + ", ".join(f"{k} {v}" for k, v in sizes.items()) if sizes else ""
    edges = edge_count(info["n_edges"], directed=not info.get("symmetrized", True))
    return (f"{info['dataset']}: {info['n_nodes']:,} nodes, {edges}, {info['n_features']:,} "
            f"features, {info['n_classes']} {'labels' if info.get('task') == 'multilabel' else 'classes'} | backend "
            f"{prepared.backend}"
            + (f" | {info['edges_symmetrized']} one-way edges symmetrized" if info["edges_symmetrized"] else "")
            + f" | split {info.get('split', 'public')}{counts} | read and prepared in {seconds:.2f}s")


def split_note(request: DataRequest, prepared: Prepared) -> str | None:
    """The note for a Planetoid-style split (``--split random``, own files, ``--dataset synthetic``,
    ``npz:DIR`` without ``splits.npz``) drawn smaller than ``--val``/``--test`` ask: the labelled
    nodes outside the train set are too few (val takes at most a third of them). None when the sizes
    were met or the split is not sized by them (a dataset's own split, a split file, fractions)."""
    if request.split_file is not None or request.train_frac is not None or request.source == "partitions":
        return None
    if request.split != "random" and request.edges is None and request.source != "synthetic" \
            and not request.drawn_by_reader:
        return None
    sizes = prepared.info.get("split_sizes") or {}
    val, test = sizes.get("val", 0), sizes.get("test", 0)
    if val >= request.n_val and test >= request.n_test:
        return None
    rest = int(np.sum(np.asarray(prepared.data.labels) >= 0)) - sizes.get("train", 0)
    return (f"note: --val {request.n_val} --test {request.n_test} do not fit the {rest} labelled nodes outside the "
            f"train set (val takes at most a third of them); using --val {val} --test {test} (give --val/--test "
            "to choose)")


def load(request: DataRequest, say: Say, *, backend: str = "auto", on_device: bool = True, two_classes: bool = True,
         raw: RawGraph | None = None, status: Say | None = None, runs: int = 1) -> Loaded:
    """Read (unless ``raw`` is given), clean and prepare the data ``request`` names, with its
    split(s) (several stacked for a batch); a summary line goes to ``say``. ``backend``: the
    propagation backend asked for (:func:`jaxgcn.plan.resolve` later says why ``auto`` fell
    back, when it did). ``two_classes``: refuse data
    whose labelled nodes are all in one class (training needs two). ``status``: where the phase
    being worked on goes (``reading cora…``; a terminal overwrites it), or None. ``runs``: the runs the
    job trains (on an accelerator the plan lays a job of many runs out otherwise: :func:`jaxgcn.plan.backend_for`)."""
    start = time.perf_counter()
    if status is not None:
        status(f"reading {request.dataset if request.edges is None else request.edges}…")
    raw = raw if raw is not None else read(request)
    n_nodes = raw.features.shape[0]
    if status is not None:
        rcm = ", RCM" if n_nodes >= REORDER_MIN_NODES else ""
        status(f"preparing {n_nodes:,} nodes (cleaning, normalizing{rcm})…")
    reorder = request.reorder
    if reorder == "auto":
        reorder = "rcm" if n_nodes >= REORDER_MIN_NODES else "none"
    cleaned = clean(raw, norm=request.norm, symmetrize=request.symmetrize, reorder=reorder)
    backend = backend_for(backend, cleaned.graph.n_nodes, cleaned.graph.n_edges, runs=runs)  # the plan decides
    prepared = lay_out(cleaned, backend, feature_norm=request.feature_norm, on_device=on_device, runs=runs)
    node_ids = raw.node_ids
    protocol = (protocol_splits(raw, request.protocol, request.splits, request.data_seed)
                if request.several_protocol_splits else None)
    del raw  # the host copy of a large graph is not needed past this point
    if two_classes:
        require_two_classes(request, prepared)
    prepared = _with_split(request, prepared, protocol)
    if request.protocol is not None:
        prepared = prepared._replace(info={**prepared.info, **protocol_info(request.dataset)})
    say(_summary(prepared, time.perf_counter() - start))
    note = split_note(request, prepared)
    if note:
        say(note)
    return Loaded(prepared, node_ids)


def one_split(data: Any) -> Any:
    """``split="random"`` draws a stacked [1, n] mask; sharded training takes the [n] one."""
    if np.ndim(data.train_mask) == 2:
        return data._replace(**{k: getattr(data, k)[0] for k in ("train_mask", "val_mask", "test_mask")})
    return data


def split_csv(loaded: Loaded) -> str:
    """The split as ``node,split`` CSV text with the input's node ids (what a split file holds)."""
    codes = split_codes(loaded.prepared)
    return split_table(codes, loaded.node_ids if loaded.node_ids is not None else np.arange(codes.size).astype(str))


def memory_estimate(loaded: Loaded, hidden: int, feature_nnz: int | None) -> MemoryEstimate:
    """The peak memory of one run of width ``hidden`` on the prepared data (``feature_nnz``: the
    stored features of sparse features, None for dense ones): what ``jaxgcn info`` reports, each layer
    at the rows it computes where the plan's ops take row plans (``gather`` on an accelerator), as
    ``train`` estimates it with ``--aggregate-first auto``."""
    prepared = loaded.prepared
    info, graph = prepared.info, prepared.data.graph
    execution = with_first_layer(concrete(Execution(backend=prepared.backend), graph), "auto", hidden,
                                 info["n_features"], feature_nnz is None)
    return estimate(info["n_nodes"], graph.n_edges, info["n_features"], prepared.n_classes, hidden=hidden,
                    backend=prepared.backend, feature_nnz=feature_nnz,
                    row_plans=layer_rows(prepared.data, execution, 2), device=current_platform() != "cpu",
                    **layout_facts(graph))
