"""The standard node-classification benchmarks by name: where each comes from, what it holds, and
the evaluation protocol it is meant to be scored with. One table (:data:`CATALOGUE`) feeds
``--dataset NAME``, ``jaxgcn datasets``, ``jaxgcn download`` and the README's dataset list.

Counts are as the source (or PyG and OGB, for it) publishes them: ``edges`` counts the distinct
directed entries of the source's edge list or adjacency without self-loops (an edge listed both
ways counts twice, one listed twice once), what ``jaxgcn info`` prints as "distinct without
self-loops" (:func:`jaxgcn.datasets.stats.listed_entries`; Cora lists 10,858 entries, 10,556 of them
distinct).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

PROTOCOLS = {
    "planetoid": "Planetoid public split: 20 labelled nodes per class, 500 validation, 1,000 test "
                 "(Yang et al. 2016; Kipf & Welling 2017)",
    "per-class-20-30": "Shchur et al. 2018: 20 per class train, 30 per class validation, the rest test; "
                       "--splits K random splits (seed --data-seed + k)",
    "wikics": "WikiCS's 20 official train/validation splits with one shared test set; --splits K uses the "
              "first K (Mernyei & Cangea 2020)",
    "ogb": "OGB's official split (split/<name>/) and OGB's metric (Hu et al. 2020)",
}
SEVERAL_SPLIT_PROTOCOLS = ("per-class-20-30", "wikics")  # protocols whose --splits K picks K of their splits
OTHER_FORMS = ("synthetic", "ogb:", "npz:", "partitioned:")  # --dataset values that are not catalogue names


@dataclass(frozen=True)
class Source:
    """One file of a dataset: where to get it and how to know it is the right file.

    Attributes:
        url: upstream address.
        filename: the file's name in the dataset's cache folder.
        size: bytes, as published (None: unknown); shown by ``jaxgcn datasets`` and never compared
            with a download (the SHA-256 is what verifies a file). A comment beside each figure says
            where it was published.
        approx: ``size`` is a rounded published figure (shown as ``~N``), not an exact byte count.
        sha256: the published or once-verified SHA-256 (None: jaxgcn records the first download's
            hash and refuses a later download that differs).
        unzip: the file is a zip archive to extract in the cache folder.
    """

    url: str
    filename: str
    size: int | None = None
    sha256: str | None = None
    unzip: bool = False
    approx: bool = False


@dataclass(frozen=True)
class Dataset:
    """One catalogue row.

    Attributes:
        name: what ``--dataset`` takes.
        format: the reader: ``planetoid`` (raw ``ind.<name>.*`` files), ``gnnbench`` (Shchur et al.'s
            npz), ``wikics`` (WikiCS's ``data.json``), ``ogb`` (OGB's CSV layout), ``ogb-bin`` (OGB's
            binary ``raw/data.npz`` layout).
        sources: the files to download (empty: bundled in the package).
        nodes, edges, features, classes: as published.
        protocol: a key of :data:`PROTOCOLS`.
        licence: the data's licence.
        citation: who to cite.
        metric: what the protocol reports (OGB names it; accuracy elsewhere).
        task: ``multi-class`` (one class per node) or ``multi-label`` (several 0/1 labels per node,
            :class:`jaxgcn.core.tasks.MultiLabel`); any other is refused with the reason.
        stem: the file stem or folder name inside the source (``pubmed`` of ``ind.pubmed.x``;
            ``arxiv`` of ``arxiv.zip``).
        bundled: shipped inside the package (no download).
    """

    name: str
    format: str
    sources: tuple[Source, ...]
    nodes: int
    edges: int
    features: int
    classes: int
    protocol: str
    licence: str
    citation: str
    metric: str = "accuracy"
    task: str = "multi-class"
    stem: str = ""
    bundled: bool = False

    @property
    def download_bytes(self) -> int | None:
        """The published size of all files, or None when one is unknown."""
        sizes = [s.size for s in self.sources]
        return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[arg-type]

    @property
    def download_approx(self) -> bool:
        """Whether :attr:`download_bytes` includes a rounded published figure."""
        return any(s.approx for s in self.sources)


PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data"
PLANETOID_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
PLANETOID_CITATION = ("Yang, Cohen & Salakhutdinov, Revisiting Semi-Supervised Learning with Graph Embeddings, "
                      "ICML 2016")
# kimiyoung/planetoid@af6abf46 data/ind.pubmed.*: (bytes, sha256) from the git blobs; ind.pubmed.allx's blob was
# not available to check, so its hash is pinned at the first download instead. Its size is that of the same file
# in D61-IA/FisherGCN@a58c1613 data/ind.pubmed.allx (a Git LFS pointer: size and sha256; the copy's other seven
# pointers match the blobs above byte for byte and hash for hash).
PUBMED_FILES: dict[str, tuple[int, str | None]] = {
    "x": (23172, "fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33"),
    "allx": (7578385, None),
    "tx": (405505, "4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d"),
    "y": (854, "e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3"),
    "ty": (12135, "ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd"),
    "ally": (224739, "0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e"),
    "graph": (471808, "5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9"),
    "test.index": (6000, "b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5"),
}

GNNBENCH_URL = "https://github.com/shchur/gnn-benchmark/raw/master/data/npz"
GNNBENCH_LICENCE = "MIT (gnn-benchmark repository)"
SHCHUR_CITATION = ("Shchur, Mumme, Bojchevski & Günnemann, Pitfalls of Graph Neural Network Evaluation, "
                   "arXiv:1811.05868, 2018")
GRAPH2GAUSS_URL = "https://github.com/abojchevski/graph2gauss/raw/master/data"
CORA_FULL_CITATION = ("Bojchevski & Günnemann, Deep Gaussian Embedding of Graphs: Unsupervised Inductive Learning "
                      "via Ranking, ICLR 2018")
WIKICS_URL = "https://github.com/pmernyei/wiki-cs-dataset/raw/master/dataset"
WIKICS_CITATION = ("Mernyei & Cangea, Wiki-CS: A Wikipedia-Based Benchmark for Graph Neural Networks, "
                   "arXiv:2007.02901, 2020")
OGB_URL = "https://snap.stanford.edu/ogb/data/nodeproppred"
OGB_CITATION = ("Hu, Fey, Zitnik, Dong, Ren, Liu, Catasta & Leskovec, Open Graph Benchmark: Datasets for Machine "
                "Learning on Graphs, NeurIPS 2020")


def _planetoid(stem: str, files: dict[str, tuple[int, str | None]] | None = None) -> tuple[Source, ...]:
    files = files or {}
    return tuple(Source(f"{PLANETOID_URL}/ind.{stem}.{part}", f"ind.{stem}.{part}", *files.get(part, (None, None)))
                 for part in PLANETOID_PARTS)


def _npz(base: str, filename: str, size: int | None = None, sha256: str | None = None) -> tuple[Source, ...]:
    return (Source(f"{base}/{filename}", filename, size, sha256),)


def _ogb(zip_stem: str, bar_steps: int | None = None) -> tuple[Source, ...]:
    """An OGB zip; ``bar_steps``: the length of the progress bar OGB's own downloader printed for it.

    OGB publishes no byte counts; its downloader (snap-stanford/ogb ogb/utils/url.py) reads the
    Content-Length and draws ``int(size / MiB) + 2`` steps, so a quoted bar of N steps puts the file
    between N - 2 and N - 1 MiB: the middle is stored, marked approximate.
    """
    size = None if bar_steps is None else (bar_steps - 2) * 2**20 + 2**19
    return (Source(f"{OGB_URL}/{zip_stem}.zip", f"{zip_stem}.zip", size, unzip=True, approx=size is not None),)


CATALOGUE: dict[str, Dataset] = {d.name.lower(): d for d in (
    Dataset("cora", "planetoid", (), 2708, 10556, 1433, 7, "planetoid", "MIT (Planetoid code)",
            PLANETOID_CITATION, stem="cora", bundled=True),
    Dataset("citeseer", "planetoid", (), 3327, 9104, 3703, 6, "planetoid", "MIT (Planetoid code)",
            PLANETOID_CITATION, stem="citeseer", bundled=True),
    Dataset("pubmed", "planetoid", _planetoid("pubmed", PUBMED_FILES), 19717, 88648, 500, 3, "planetoid",
            "MIT (Planetoid code)", PLANETOID_CITATION, stem="pubmed"),
    Dataset("shchur-cora", "gnnbench", _npz(GNNBENCH_URL, "cora.npz", 540580,
                                            "068e22d90c3849b4057dfb05851741428992af058efcd4e7ebb4186f3d581de2"),
            2708, 5429, 1433, 7, "per-class-20-30", GNNBENCH_LICENCE, SHCHUR_CITATION, stem="cora"),
    Dataset("shchur-citeseer", "gnnbench", _npz(GNNBENCH_URL, "citeseer.npz", 1348784,
                                                "280278b21b434c047922e8389518861416fb3ad39389c27865ff0e6bbb0aaab7"),
            3312, 4715, 3703, 6, "per-class-20-30", GNNBENCH_LICENCE, SHCHUR_CITATION, stem="citeseer"),
    Dataset("cora-full", "gnnbench", _npz(GRAPH2GAUSS_URL, "cora.npz"), 19793, 126842, 8710, 70, "per-class-20-30",
            "MIT (graph2gauss repository)", CORA_FULL_CITATION, stem="cora"),
    # the next four sizes: the Git LFS pointers of the same files in D61-IA/FisherGCN@a58c1613 data/*.npz (the
    # blobs of shchur/gnn-benchmark@1e72912a are too large to be checked here)
    Dataset("amazon-computers", "gnnbench", _npz(GNNBENCH_URL, "amazon_electronics_computers.npz", 31921488),
            13752, 491722, 767, 10, "per-class-20-30", GNNBENCH_LICENCE, SHCHUR_CITATION,
            stem="amazon_electronics_computers"),
    Dataset("amazon-photo", "gnnbench", _npz(GNNBENCH_URL, "amazon_electronics_photo.npz", 17113960), 7650, 238162,
            745, 8, "per-class-20-30", GNNBENCH_LICENCE, SHCHUR_CITATION, stem="amazon_electronics_photo"),
    Dataset("coauthor-cs", "gnnbench", _npz(GNNBENCH_URL, "ms_academic_cs.npz", 12835626), 18333, 163788, 6805, 15,
            "per-class-20-30", GNNBENCH_LICENCE, SHCHUR_CITATION, stem="ms_academic_cs"),
    Dataset("coauthor-physics", "gnnbench", _npz(GNNBENCH_URL, "ms_academic_phy.npz", 16374005), 34493, 495924,
            8415, 5, "per-class-20-30", GNNBENCH_LICENCE, SHCHUR_CITATION, stem="ms_academic_phy"),
    Dataset("wikics", "wikics", _npz(WIKICS_URL, "data.json"), 11701, 216123, 300, 10, "wikics", "MIT",
            WIKICS_CITATION, stem="data"),
    # OGB's bars (see _ogb): "0/81" https://github.com/snap-stanford/ogb/issues/463 (2023)
    Dataset("ogbn-arxiv", "ogb", _ogb("arxiv", 81), 169343, 1166243, 128, 40, "ogb", "ODC-BY", OGB_CITATION,
            stem="arxiv"),
    # "Downloaded 1.38 GB: 1414/1414" https://github.com/snap-stanford/ogb/issues/410 (2023)
    Dataset("ogbn-products", "ogb", _ogb("products", 1414), 2449029, 61859140, 100, 47, "ogb", "Amazon license",
            OGB_CITATION, stem="products"),
    # "This will download 56.17GB", "57519/57519" https://github.com/snap-stanford/ogb/issues/506 (2025)
    Dataset("ogbn-papers100M", "ogb-bin", _ogb("papers100M-bin", 57519), 111059956, 1615685872, 128, 172, "ogb",
            "ODC-BY", OGB_CITATION, stem="papers100M-bin"),
    # "Downloaded 0.21 GB: 216/216" Graph-Learning-Benchmarks/gli@53bc9d5d datasets/ogbn-proteins/ogbn-proteins.ipynb
    # 8 features: each node's mean of its edges' 8 features (OGB's GCN example; jaxgcn.datasets.ogb.incident_edge_mean)
    Dataset("ogbn-proteins", "ogb", _ogb("proteins", 216), 132534, 39561252, 8, 112, "ogb", "CC-0", OGB_CITATION,
            metric="rocauc", task="multi-label", stem="proteins"),
)}


def lookup(name: str) -> Dataset | None:
    """The catalogue row of ``name`` (case and ``_``/``-`` insensitive), or None."""
    return CATALOGUE.get(name.lower().replace("_", "-"))


def check_name(name: str, partitions: bool = False) -> Dataset | None:
    """The catalogue row of a ``--dataset`` value, or None for another form (``synthetic``,
    ``ogb:DIR``, ``npz:DIR``; ``partitioned:DIR`` where ``partitions`` says the caller reads partition
    files: sharded training); an unknown name is a ValueError naming the closest catalogue name and
    every form (:func:`available`). Reads no file: ``jaxgcn`` checks the name before it imports JAX.

    >>> check_name("CiteSeer").name, check_name("npz:graphs/mine"), check_name("partitioned:p", partitions=True)
    ('citeseer', None, None)
    """
    entry = lookup(name)
    key = name.lower()
    if key.startswith(OTHER_FORMS[3]) and not partitions:
        raise ValueError(f"dataset {name!r}: partition files hold per-device row blocks that only "
                         "`jaxgcn train --shard-graph` or `--distributed` reads; train with one of those flags, "
                         "or name the original dataset")
    if entry is not None or key == OTHER_FORMS[0] or key.startswith(OTHER_FORMS[1:]):
        return entry
    known = ", ".join(form for form, _ in available())
    close = difflib.get_close_matches(key, list(CATALOGUE), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ValueError(f"unknown dataset {name!r}{hint}; choose one of {known} (in Python: data_dir=DIR)")


def refuse_unsupported(entry: Dataset) -> None:
    """A dataset the model cannot be trained on is refused with the reason, before any download."""
    if entry.task not in ("multi-class", "multi-label"):
        raise ValueError(f"dataset {entry.name}: a {entry.task} task ({entry.classes} binary labels per node, "
                         f"scored by {entry.metric}); jaxgcn's GCN predicts one class per node with a softmax, so "
                         "it cannot be trained or scored on it: pick a multi-class dataset (`jaxgcn datasets`)")


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 10**6 else f"{n:,}"


def available() -> list[tuple[str, str]]:
    """``(form, description)`` of every value ``--dataset`` accepts: the one list that ``--help``,
    ``jaxgcn datasets`` and the unknown-dataset error all print (catalogue names first)."""
    names = [(d.name, f"{d.citation.split(',')[0]}: {_count(d.nodes)} nodes, {_count(d.edges)} edge entries, "
                      f"{_count(d.features)} features, {d.classes} classes"
              + ("" if d.task == "multi-class" else f" ({d.task}: listed, refused)"))
             for d in CATALOGUE.values()]
    return names + [
        ("synthetic", "stochastic block model with class-signal features (--nodes, --classes, ...)"),
        ("<name> --data-dir DIR", "raw Planetoid files ind.<name>.* in DIR (e.g. your own PubMed copy)"),
        ("ogb:DIR", "an OGB node-property dataset in its raw layout (raw/*.csv.gz or raw/data.npz, split/<name>/)"),
        ("npz:DIR", "adjacency.npz + features.npy|.npz + labels.npy [+ splits.npz] in DIR"),
        ("partitioned:DIR", "per-device row blocks written by `jaxgcn partition` (train --shard-graph or "
                            "--distributed only)"),
    ]
