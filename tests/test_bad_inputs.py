"""Malformed inputs end in one line, exit status 2 and nothing written; file parsing never crashes.

A TABLE of every bad input of issue 12 (sections 2 and 5) runs through ``jaxgcn.cli.main``
in-process: each case writes a valid graph plus its one bad file into ``tmp_path`` and checks the
exit status, that stderr is exactly one ``jaxgcn: error:`` line (no traceback, no NumPy ``usecols``
advice), the message, and that no file was left behind. Property-based tests (hypothesis) then
feed random bytes and random mutations of valid files to the loaders: they return or raise
ValueError, nothing else.
"""

from __future__ import annotations

import gzip
import pickle
import re
import struct
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from cli_run import unwrap

from jaxgcn.cli import main
import tiny_datasets
from tiny_datasets import P_ALLX, P_F, P_TEST, planetoid_parts
from jaxgcn.datasets import load_raw, prepare
from jaxgcn.datasets.files import load_files, read_features
from jaxgcn.datasets.planetoid import safe_load_pickle
from jaxgcn.datasets.splits import planetoid_split
from jaxgcn.core.graph import from_edges

N, CLASSES = 30, ("alpha", "beta", "gamma")


def label_of(i: int) -> int:
    return i % 3


def _edges(ids: list[str]) -> str:
    return "src,dst\n" + "".join(f"{ids[i]},{ids[(i + 1) % N]}\n{ids[i]},{ids[(i + 7) % N]}\n" for i in range(N))


def _labels(ids: list[str]) -> str:
    return "node,label\n" + "".join(f"{ids[i]},{CLASSES[label_of(i)]}\n" for i in range(N))


NAMED, NUMBERED = [f"n{i}" for i in range(N)], [str(i) for i in range(N)]
FEATURES = np.array([[label_of(i) == 0, label_of(i) == 1, (i % 5 + 1) / 5] for i in range(N)], np.float32)
VALID = {
    # string ids, dense CSV features, class names
    "edges.csv": _edges(NAMED),
    "feats.csv": "node,f0,f1,f2\n" + "".join(f"n{i},{a:g},{b:g},{c:g}\n" for i, (a, b, c) in enumerate(FEATURES)),
    "trip.csv": "node,feature,value\n" + "".join(f"n{i},{j},{FEATURES[i, j]:g}\n" for i in range(N) for j in range(3)
                                                  if FEATURES[i, j]),
    "labels.csv": _labels(NAMED),
    "edges.txt": _edges(NAMED).replace(",", " "),  # whitespace-separated, under a "src dst" header
    # integer ids 0..29 (row i of an .npy/.npz is node i)
    "edges_int.csv": _edges(NUMBERED),
    "labels_int.csv": _labels(NUMBERED),
}
BASE = {"--edges": "edges.csv", "--features": "feats.csv", "--labels": "labels.csv"}
INT_IDS = {"--edges": "edges_int.csv", "--labels": "labels_int.csv"}
NO_FILES = {"--edges": None, "--features": None, "--labels": None}
TRAIN = ["--train-per-class", "2", "--val", "6", "--test", "10", "--epochs", "2",
         "--no-compile-cache", "--quiet"]


def write_valid(d: Path) -> None:
    for name, text in VALID.items():
        (d / name).write_text(text)
    np.save(d / "x.npy", FEATURES)
    sp.save_npz(d / "x.npz", sp.csr_matrix(FEATURES))


# --- writers of bad files (each takes the case's folder) -------------------------------------------


def text(name: str, content: str) -> Callable[[Path], None]:
    return lambda d: (d / name).write_text(content, encoding="utf-8")


def raw(name: str, content: bytes) -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes(content)


def both(*writers: Callable[[Path], None]) -> Callable[[Path], None]:
    return lambda d: [w(d) for w in writers] and None


def folder(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).mkdir()


def npz(name: str, **arrays: Any) -> Callable[[Path], None]:
    """An .npz with the given arrays, as scipy.sparse.save_npz lays them out (format, shape, ...)."""
    def write(d: Path) -> None:
        np.savez(d / name, **{k: np.asarray(v) for k, v in arrays.items()})
    return write


def csr_arrays(x: np.ndarray = FEATURES) -> dict[str, np.ndarray]:
    m = sp.csr_matrix(x)
    return {"format": np.array(b"csr"), "shape": np.array(m.shape), "data": m.data, "indices": m.indices.copy(),
            "indptr": m.indptr.copy()}


def bad_csr(**changes: Callable[[np.ndarray], np.ndarray]) -> Callable[[Path], None]:
    arrays = csr_arrays()
    for key, change in changes.items():
        arrays[key] = change(arrays[key].copy())
    return npz("x.npz", **arrays)


def setitem(index: Any, value: Any) -> Callable[[np.ndarray], np.ndarray]:
    def change(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.int64)
        a[index] = value
        return a
    return change


def npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """A version 1.0 .npy header announcing ``shape`` (what np.save writes before the data)."""
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def npy(name: str, array: Any) -> Callable[[Path], None]:
    return lambda d: np.save(d / name, array)


def truncated(name: str, source: Callable[[Path], None], keep: float = 0.5) -> Callable[[Path], None]:
    def write(d: Path) -> None:
        source(d)
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: int(len(data) * keep)])
    return write


def lying_npz(d: Path) -> None:
    """A zip whose 'data' member's header announces 10**13 values but stores 4 bytes."""
    import zipfile

    np.savez(d / "x.npz", **csr_arrays())
    with zipfile.ZipFile(d / "x.npz", "a") as z:
        z.writestr("data2.npy", npy_header((10**13,)) + b"\0" * 4)


# --- a tiny raw Planetoid dataset (ind.tiny.*) -----------------------------------------------------

def write_planetoid(d: Path, **override: Any) -> None:
    tiny_datasets.write_planetoid(d / "planetoid", **override)


def planetoid(**override: Any) -> Callable[[Path], None]:
    return lambda d: write_planetoid(d, **override)


def allx_indices(*bad: int) -> sp.csr_matrix:
    allx = planetoid_parts()["allx"].copy()
    allx.indices[3: 3 + len(bad)] = bad
    return allx


_RECONSTRUCT = np.zeros(1).__reduce__()[0]


class HugeArray:
    """Unpickles as ``_reconstruct(ndarray, (10**13,), 'b')``: ten terabytes if nothing checks."""

    def __reduce__(self):
        return _RECONSTRUCT, (np.ndarray, (10**13,), b"b")


class HugeState:
    """An empty array whose pickled state claims shape (10**13,) over 1 byte of data."""

    def __reduce__(self):
        return _RECONSTRUCT, (np.ndarray, (0,), b"b"), (1, (10**13,), np.dtype("i1"), False, b"x")


def npz_dir(**override: Any) -> Callable[[Path], None]:
    """A ``--dataset npz:DIR`` folder (adjacency.npz, features.npy, labels.npy), parts overridden."""
    def write(d: Path) -> None:
        root = d / "arrays"
        root.mkdir()
        adj = sp.coo_matrix((np.ones(N), (np.arange(N), (np.arange(N) + 1) % N)), shape=(N, N))
        sp.save_npz(root / "adjacency.npz", adj)
        np.save(root / "features.npy", FEATURES)
        np.save(root / "labels.npy", np.arange(N) % 3)
        np.savez(root / "splits.npz", train=np.arange(6), val=np.arange(6, 12), test=np.arange(12, 24))
        for name, writer in override.items():
            writer(root)
    return write


# --- the table ---------------------------------------------------------------------------------------


def write_ogb(d: Path, splits: tuple[str, ...] = ("other", "time")) -> Path:
    """A ``--dataset ogb:DIR`` folder (header-less gzip CSVs) with one split folder per name."""
    root = d / "ogb"

    def gz(path: Path, rows: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as f:
            f.write("".join(",".join(str(v) for v in np.atleast_1d(row)) + "\n" for row in rows))

    gz(root / "raw" / "edge.csv.gz", [(i, (i + 1) % N) for i in range(N)])
    gz(root / "raw" / "node-label.csv.gz", np.arange(N) % 3)
    for name in splits:
        for part, ids in (("train", range(6)), ("valid", range(6, 12)), ("test", range(12, 24))):
            gz(root / "split" / name / f"{part}.csv.gz", ids)
    return root


class Case(NamedTuple):
    id: str
    write: Callable[[Path], None] | None  # writes the bad file(s) into the case's folder
    flags: dict[str, str | None]  # replaces BASE's file flags (None drops one)
    args: list[str]  # added after the training flags; "{d}" is the case's folder
    pattern: str  # re.search'ed in the message


ROW_IDS = {**INT_IDS}
CASES = [
    # section 2: sparse structures validated at the boundary (today: garbage training, then a segfault)
    Case("npz-column-index-x1000", bad_csr(indices=lambda a: a * 1000 + 1000), {**ROW_IDS, "--features": "x.npz"}, [],
         r"features file .*x\.npz: column index \d+ \(stored entry 0\) is outside \[0, 3\) of the 30 x 3 matrix"),
    Case("npz-column-index-at-the-count", bad_csr(indices=setitem(2, 3)), {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: column index 3 \(stored entry 2\) is outside \[0, 3\)"),  # the first index past the end
    Case("npz-negative-column-index", bad_csr(indices=setitem(2, -3)), {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: column index -3 \(stored entry 2\) is outside \[0, 3\)"),
    Case("npz-indptr-decreasing", bad_csr(indptr=setitem(5, 0)), {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: indptr decreases at row 4 \(\d+ -> 0\); pointers must never decrease"),
    Case("npz-indptr-too-short", bad_csr(indptr=lambda a: a[:-1]), {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: indptr has 30 entries; a CSR matrix with 30 rows needs 31"),
    Case("npz-indptr-not-from-0", bad_csr(indptr=setitem(0, 1)), {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: indptr starts at 1, not 0"),
    Case("npz-indptr-past-the-entries", bad_csr(indptr=setitem(-1, 10**6)), {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: indptr ends at 1000000 but there are \d+ stored indices"),
    Case("npz-values-for-other-entries", bad_csr(data=lambda a: a[:-2]), {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: \d+ stored values for \d+ indices"),
    Case("npz-coo-row-out-of-range",
         npz("x.npz", format=np.array(b"coo"), shape=np.array([N, 3]), data=np.ones(2), row=np.array([0, N + 5]),
             col=np.array([0, 1])), {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: row index 35 \(stored entry 1\) is outside \[0, 30\)"),
    Case("npz-shape-of-10e13-rows",
         npz("x.npz", format=np.array(b"coo"), shape=np.array([10**13, 3]), data=np.ones(0), row=np.zeros(0, int),
             col=np.zeros(0, int)), {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: shape 10,000,000,000,000 x 3 means 10,000,000,000,000 nodes, more than the 2,147,483,647"),
    Case("npz-complex-values", npz("x.npz", **{**csr_arrays(), "data": csr_arrays()["data"] * 1j}),
         {**ROW_IDS, "--features": "x.npz"}, [], r"x\.npz: array 'data': holds complex numbers"),
    Case("npz-unsupported-format", npz("x.npz", **{**csr_arrays(), "format": np.array(b"bsr")}),
         {**ROW_IDS, "--features": "x.npz"}, [], r"x\.npz: sparse format 'bsr' is not supported; save it as CSR"),
    Case("npz-truncated", truncated("x.npz", lambda d: sp.save_npz(d / "x.npz", sp.csr_matrix(FEATURES))),
         {**ROW_IDS, "--features": "x.npz"}, [], r"x\.npz: not a readable \.npz archive .*truncated or not a zip"),
    Case("npz-not-a-zip", text("x.npz", "node,f0\n0,1\n"), {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: not a readable \.npz archive"),
    Case("npz-member-announces-10e13-values", lying_npz, {**ROW_IDS, "--features": "x.npz"}, [],
         r"x\.npz: (array 'data2': its header announces shape \(10000000000000,\)|its arrays would need)"),
    Case("planetoid-allx-indices-1e6-and-minus-3", planetoid(allx=allx_indices(10**6, -3)), NO_FILES,
         ["--dataset", "tiny", "--data-dir", "{d}/planetoid"],
         r"ind\.tiny\.allx: column index (1000000|-3) \(stored entry \d\) is outside \[0, 8\) of the 540 x 8 matrix"),
    Case("planetoid-pickle-of-a-10e13-element-array", planetoid(x=pickle.dumps(HugeArray(), protocol=4)), NO_FILES,
         ["--dataset", "tiny", "--data-dir", "{d}/planetoid"],
         r"ind\.tiny\.x: not a readable Planetoid pickle \(an array of shape \(10000000000000,\)"),
    Case("planetoid-pickle-state-of-10e13-elements", planetoid(y=pickle.dumps(HugeState(), protocol=4)), NO_FILES,
         ["--dataset", "tiny", "--data-dir", "{d}/planetoid"],
         r"ind\.tiny\.y: not a readable Planetoid pickle \(an array of shape \(10000000000000,\) .* from 1 bytes"),
    Case("planetoid-truncated-pickle", planetoid(graph=pickle.dumps(planetoid_parts()["graph"], protocol=4)[:50]),
         NO_FILES, ["--dataset", "tiny", "--data-dir", "{d}/planetoid"],
         r"ind\.tiny\.graph: not a readable Planetoid pickle"),
    Case("planetoid-test-index-1e13", planetoid(**{"test.index": "\n".join(["10000000000000"] + [
        str(i) for i in range(P_ALLX + 1, P_ALLX + P_TEST)])}), NO_FILES,
         ["--dataset", "tiny", "--data-dir", "{d}/planetoid"],
         r"ind\.tiny\.test\.index: test id 10,000,000,000,000 \([\d,]+ nodes\) means [\d,]+ nodes, more than the "
         r"2,147,483,647"),
    Case("planetoid-empty-test-index", planetoid(**{"test.index": ""}), NO_FILES,
         ["--dataset", "tiny", "--data-dir", "{d}/planetoid"],
         r"ind\.tiny\.test\.index: empty; it must list the test node ids, one integer per line"),
    Case("planetoid-test-index-not-integers", planetoid(**{"test.index": "540\n5x1\n"}), NO_FILES,
         ["--dataset", "tiny", "--data-dir", "{d}/planetoid"],
         r"ind\.tiny\.test\.index: line 2: '5x1' is not a node id"),
    Case("npz-dir-adjacency-of-10e13-nodes",
         npz_dir(adj=npz("adjacency.npz", format=np.array(b"coo"), shape=np.array([10**13, 10**13]),
                         data=np.ones(0), row=np.zeros(0, int), col=np.zeros(0, int))), NO_FILES,
         ["--dataset", "npz:{d}/arrays"], r"adjacency file .*adjacency\.npz: shape 10,000,000,000,000 x .* more than"),
    Case("npz-dir-label-2e9-classes", npz_dir(lab=npy("labels.npy", np.r_[np.arange(N - 1) % 3, 2 * 10**9])), NO_FILES,
         ["--dataset", "npz:{d}/arrays"],
         r"2,000,000,001 classes \(the largest label \+ 1\) would need at least .*; class ids must count from 0"),
    Case("synthetic-2e9-nodes", None, NO_FILES, ["--dataset", "synthetic", "--nodes", "2000000000"],
         r"synthetic: 2,000,000,000 nodes x 64 features .* would need at least [\d,.]+ [GT]iB, more than"),
    # absurd sizes and out-of-range integers, refused before anything is allocated
    Case("edge-file-with-a-10-MB-node-id", text("edges.csv", VALID["edges.csv"] + "n1," + "x" * 10_000_000 + "\n"
                                                 + "n1,n2\n" * 20_000), {}, [],
         r"edges file .*edges\.csv: reading [\d,]+ lines x 2 columns as text, with a 10,000,000-character cell on line "
         r"62 would need at least .*; NumPy stores every cell at the widest"),
    Case("triplet-feature-index-2**40", text("trip.csv", VALID["trip.csv"] + "n3,1099511627776,1\n"),
         {"--features": "trip.csv"}, [],
         r"features file .*trip\.csv: feature index 1099511627776 on line \d+ .* means 1,099,511,627,777 features, "
         r"more than the 2,147,483,647"),
    Case("triplet-feature-index-1e9", text("trip.csv", VALID["trip.csv"] + "n3,1000000000,1\n"),
         {"--features": "trip.csv"}, [],
         r"trip\.csv: feature index 1000000000 on line \d+ .* would need at least [\d,.]+ [GT]iB, more than"),
    Case("--seeds-1e20", None, {}, ["--seeds", "1e20"], r"argument --seeds: '1e20' is not a positive integer"),
    Case("--seeds-10**20", None, {}, ["--seeds", str(10**20)], r"argument --seeds: 100000000000000000000 is too large"),
    *[Case(f"{flag}-99999999999999999999", None, {}, [flag, "99999999999999999999"],
           rf"argument {flag}: 99999999999999999999 is too large; give an integer from [01] to [\d,]+")
      for flag in ("--layers", "--epochs", "--window", "--patience", "--seed", "--splits", "--hidden", "--log-every")],
    Case("--seed-2**63", None, {}, ["--seed", str(2**63)],
         r"argument --seed: 9223372036854775808 is too large; give an integer from 0 to 2,147,483,647"),
    Case("--seed-negative", None, {}, ["--seed", "-1"], r"argument --seed: -1 is below 0"),
    Case("--seed-plus-seeds-past-int32", None, {}, ["--seed", "2147483647", "--seeds", "2"],
         r"--seed 2147483647 --seeds 2: the last seed, 2147483648, does not fit in int32 .*use --seed 2147483646 "
         r"or lower"),
    Case("--data-seed-negative", None, {}, ["--data-seed", "-5"], r"argument --data-seed: -5 is below 0"),
    # .npy features
    Case("npy-structured", npy("x.npy", np.zeros(N, dtype=[("a", "f4"), ("b", "f4")])),
         {**ROW_IDS, "--features": "x.npy"}, [], r"x\.npy: is a structured array \(fields a, b\)"),
    Case("npy-complex", npy("x.npy", FEATURES.astype(np.complex64)), {**ROW_IDS, "--features": "x.npy"}, [],
         r"x\.npy: holds complex numbers \(complex64\); save the real values"),
    Case("npy-object", npy("x.npy", np.array([[1, "a"]] * N, dtype=object)), {**ROW_IDS, "--features": "x.npy"}, [],
         r"x\.npy: holds Python objects"),
    Case("npy-zero-columns", npy("x.npy", np.zeros((N, 0), np.float32)), {**ROW_IDS, "--features": "x.npy"}, [],
         r"x\.npy: shape \(30, 0\) has no columns"),
    Case("npy-zero-rows", npy("x.npy", np.zeros((0, 3), np.float32)), {**ROW_IDS, "--features": "x.npy"}, [],
         r"x\.npy: shape \(0, 3\) has no rows"),
    Case("npy-one-dimensional", npy("x.npy", np.zeros(N, np.float32)), {**ROW_IDS, "--features": "x.npy"}, [],
         r"x\.npy: shape \(30,\); expected \[nodes, features\]"),
    Case("npy-truncated", truncated("x.npy", npy("x.npy", FEATURES), 0.8), {**ROW_IDS, "--features": "x.npy"}, [],
         r"x\.npy: its header announces shape \(30, 3\) of float32 \(360 bytes\) but \d+ bytes follow"),
    Case("npy-header-of-10e13-values", raw("x.npy", npy_header((10**13, 3)) + b"\0" * 12),
         {**ROW_IDS, "--features": "x.npy"}, [], r"x\.npy: its header announces shape \(10000000000000, 3\)"),
    Case("npy-not-numpy", text("x.npy", "node,f0\n"), {**ROW_IDS, "--features": "x.npy"}, [],
         r"x\.npy: not a NumPy \.npy file"),
    Case("features-value-overflows-float32", text("feats.csv", VALID["feats.csv"].replace("n2,0,0,0.6", "n2,0,0,1e39")),
         {}, [], r"feats\.csv: value 1e\+39 at line 4, column 4 overflows float32"),
    # graphs that cannot be trained
    Case("no-edges-after-cleaning", text("edges.csv", "src,dst\n" + "".join(f"n{i},n{i}\n" for i in range(N))), {}, [],
         r"no edges between two different nodes \(30 input edge\(s\), 30 of them self-loops\)"),
    Case("edge-weight-overflows-float32", text("edges.csv", VALID["edges.csv"].replace("src,dst\n", "src,dst,weight\n")
                                                .replace("\n", ",1\n").replace("src,dst,weight,1", "src,dst,weight")
                                                .replace("n0,n1,1", "n0,n1,1e39")), {}, [],
         r"edges file .*edges\.csv: line 2: weight 1e39 overflows float32 \(largest 3\.4e38\); rescale the weights"),
    # section 5: file-parsing messages
    Case("gzip-edges", raw("edges.csv", gzip.compress(VALID["edges.csv"].encode())), {}, [],
         r"edges file .*edges\.csv: is gzip-compressed, not text; decompress it first \(gunzip -k"),
    Case("binary-labels", raw("labels.csv", bytes(range(256)) * 4), {}, [],
         r"labels file .*labels\.csv: is binary, not UTF-8 text \(a NUL byte on line 1\)"),
    Case("latin-1-labels", raw("labels.csv", VALID["labels.csv"].replace("n4,beta", "n4,bêta").encode("latin-1")), {},
         [], r"labels file .*labels\.csv: is not UTF-8 text \(byte 0xea on line 6, column 5\); re-save it as UTF-8, "
             r"e\.g\. iconv -f latin1"),
    Case("npz-given-as-edges", lambda d: (d / "edges.csv").write_bytes((d / "x.npz").read_bytes()), {},
         [], r"edges file .*edges\.csv: is a zip archive \(e\.g\. \.npz\), not a text table"),
    Case("edges-row-too-short", text("edges.csv", "src,dst\nn0,n1\nn1,n2\nn2\n"), {}, [],
         r"edges file .*edges\.csv: line 4 has 1 column\(s\) but line 2 has 2; every row needs the same number"),
    Case("edges-row-too-short-after-blank-lines", text("edges.csv", "\nsrc,dst\n\nn0,n1\n\nn1,n2,3,4\n"), {}, [],
         r"edges\.csv: line 6 has 4 column\(s\) but line 4 has 2"),
    Case("edges-rows-wider-than-header", text("edges.csv", "src,dst\nn0,n1,1\nn1,n2,1\n"), {}, [],
         r"edges\.csv: the header src,dst names 2 column\(s\) but line 2 has 3"),
    Case("features-bad-number-after-blank-line", text("feats.csv", "node,f0\n\nn0,1\n\n\nn1,x\n"), {}, [],
         r"feats\.csv: line 6, column 2: 'x' is not a number"),
    Case("whitespace-edges-with-from-to-header", text("e.txt", "from to\n" + "".join(f"{i} {(i + 1) % N}\n"
                                                                                      for i in range(N))),
         {**ROW_IDS, "--edges": "e.txt", "--features": "x.npy"}, [],
         r"edges file .*e\.txt: header from,to lacks column\(s\) src, dst; expected src,dst,weight"),
    Case("ragged-split-file", text("split.csv", "node,split\nn0,train\nn1\nn2,test\n"), {},
         ["--split-file", "{d}/split.csv"],
         r"split file .*split\.csv: line 3 has 1 column\(s\) but line 2 has 2"),
    Case("split-file-is-gzip", raw("split.csv", gzip.compress(b"node,split\nn0,train\n")), {},
         ["--split-file", "{d}/split.csv"], r"split file .*split\.csv: is gzip-compressed"),
    Case("unlabelled-node-in-split", both(text("labels.csv", _labels(NAMED).replace("n29,gamma\n", "")),
                                          text("split.csv", "node,split\nn29,train\nn0,train\nn1,val\nn2,test\n")), {},
         ["--split-file", "{d}/split.csv"],
         r"the train split contains unlabelled nodes \(1, e\.g\. node 'n29'\); give them labels or drop them"),
    Case("class-too-small-named", None, {}, ["--train-per-class", "11"],
         r"class 'alpha' has 10 labelled nodes, fewer than the 11 train nodes per class"),
    Case("edges-is-a-directory", folder("edges_dir"), {"--edges": "edges_dir"}, [],
         r"edges file .*edges_dir: is a directory; give the file itself"),
    Case("labels-is-a-directory", folder("labels_dir"), {"--labels": "labels_dir"}, [],
         r"labels file .*labels_dir: is a directory"),
    Case("npy-features-is-a-directory", folder("feats.npy"), {**ROW_IDS, "--features": "feats.npy"}, [],
         r"features file .*feats\.npy: is a directory"),
    Case("split-file-is-a-directory", folder("split_dir"), {}, ["--split-file", "{d}/split_dir"],
         r"split file .*split_dir: is a directory"),
    Case("edges-missing", None, {"--edges": "nope.csv"}, [], r"edges file .*nope\.csv: not found"),
    # library errors name the parameter (data_dir=, split=); the CLI puts the flag that sets it in front
    Case("planetoid-data-dir-missing", None, NO_FILES, ["--dataset", "tiny", "--data-dir", "{d}/nowhere"],
         r"^jaxgcn: error: --data-dir: data_dir=.*nowhere: not a directory; pass the folder holding ind\.<name>\.x"),
    Case("planetoid-data-dir-without-a-graph-file", None, NO_FILES, ["--dataset", "planetoid", "--data-dir", "{d}"],
         r"^jaxgcn: error: --data-dir: data_dir=.*: expected exactly one ind\.<name>\.graph file, found none"),
    Case("ogb-several-splits", write_ogb, NO_FILES, ["--dataset", "ogb:{d}/ogb"],
         r"^jaxgcn: error: --ogb-split: split=None: .*ogb/split holds several splits \(other, time\); name the one"),
    Case("ogb-unknown-split", write_ogb, NO_FILES, ["--dataset", "ogb:{d}/ogb", "--ogb-split", "nope"],
         r"^jaxgcn: error: --ogb-split: split='nope': .*ogb/split has no such folder; it has other, time"),
]


def argv(case: Case, d: Path) -> list[str]:
    flags = {**BASE, **case.flags}
    out = ["train"]
    for flag, value in flags.items():
        if value is not None:
            out += [flag, str(d / value)]
    return out + TRAIN + [a.format(d=d) for a in case.args] + ["--json", str(d / "out.json")]


def files_under(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


@pytest.mark.parametrize("case", CASES, ids=[(c.values[0] if hasattr(c, "values") else c).id for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(case, tmp_path, capsys):
    write_valid(tmp_path)
    if case.write is not None:
        case.write(tmp_path)
    before = files_under(tmp_path)
    try:
        code = main(argv(case, tmp_path))
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = unwrap(err).splitlines()  # one message (wrapped into short lines when long)
    assert len(lines) == 1 and lines[0].startswith("jaxgcn: error: "), err
    assert "Traceback" not in err and "usecols" not in err
    assert re.search(case.pattern, lines[0]), lines[0]
    assert files_under(tmp_path) == before  # no --json, no temp file, nothing else


@pytest.mark.parametrize("flags", [{}, {"--features": "trip.csv"}, {**INT_IDS, "--features": "x.npz"},
                                   {**INT_IDS, "--features": "x.npy"}], ids=["dense", "triplets", "npz", "npy"])
def test_the_valid_files_the_table_corrupts_train(flags, tmp_path, capsys):
    """The baseline: every error above comes from the one bad file, not from the rest."""
    write_valid(tmp_path)
    case = Case("valid", None, flags, [], "")
    assert main(argv(case, tmp_path)) == 0, capsys.readouterr().err
    assert (tmp_path / "out.json").is_file()


def test_the_valid_planetoid_folder_loads(tmp_path):
    write_planetoid(tmp_path)
    graph = load_raw(tmp_path / "planetoid", "tiny")
    assert graph.features.shape == (P_ALLX + P_TEST, P_F) and graph.splits["test"].size == P_TEST
    prepared = prepare(graph, backend="segment", on_device=False)
    assert prepared.info["n_classes"] == 3


def test_library_errors_name_the_parameter_and_the_cli_the_flag(tmp_path, capsys, monkeypatch):
    """The library's message begins with its parameter; ``jaxgcn.cli.main`` prints it with the flag in front."""
    from jaxgcn.native import csr as csr_mod
    from jaxgcn.datasets import synthetic
    from jaxgcn.datasets.ogb import load_ogb

    with pytest.raises(ValueError, match=r"^data_dir=.*nowhere: not a directory"):
        load_raw(tmp_path / "nowhere", "tiny")
    root = write_ogb(tmp_path)
    with pytest.raises(ValueError, match=r"^split=None: .*several splits \(other, time\)"):
        load_ogb(root)
    assert load_ogb(root, split="time").splits["train"].size == 6
    monkeypatch.setattr(csr_mod, "_load", lambda: (False, "disabled by JAXGCN_NO_KERNELS"))
    raw = synthetic(60, n_classes=3, n_features=4, train_per_class=2, seed=0)
    with pytest.raises(ValueError, match=r"^backend='csr' needs the fused CPU kernel, .*; use backend='segment'"):
        prepare(raw, backend="csr")
    assert main(["train", "--dataset", "synthetic", "--nodes", "60", "--classes", "3", "--features", "4",
                 "--backend", "csr", *TRAIN]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxgcn: error: --backend: backend='csr' needs the fused CPU kernel"), err
    assert main(["train", "--dataset", f"ogb:{root}", *TRAIN]) == 2
    assert unwrap(capsys.readouterr().err).startswith("jaxgcn: error: --ogb-split: split=None: ")


# --- inputs that used to fail and now load -----------------------------------------------------------


def same_graph(a, b) -> None:
    assert list(a.node_ids) == list(b.node_ids) and a.class_names == b.class_names
    np.testing.assert_array_equal(a.senders, b.senders)
    np.testing.assert_array_equal(a.receivers, b.receivers)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.features.toarray() if sp.issparse(a.features) else a.features,
                                  b.features.toarray() if sp.issparse(b.features) else b.features)


@pytest.mark.parametrize("edit", [
    lambda s: "\ufeff" + s,  # a byte-order mark before the header
    lambda s: s.replace("\n", "\r\n"),  # Windows line ends
    lambda s: "\n".join(",".join(f'"{c}"' for c in line.split(",")) if line else "" for line in s.split("\n")),
    lambda s: "\n".join(", ".join(f' "{c}" ' for c in line.split(",")) if line else "" for line in s.split("\n")),
    lambda s: "\n\n" + s.replace("\n", "\n\n"),  # blank lines
], ids=["bom", "crlf", "quoted", "quoted-and-spaced", "blank-lines"])
def test_bom_quotes_crlf_and_blank_lines_read_as_the_plain_file(edit, tmp_path):
    write_valid(tmp_path)
    plain = load_files(tmp_path / "edges.csv", tmp_path / "feats.csv", tmp_path / "labels.csv")
    for name in ("edges.csv", "feats.csv", "labels.csv"):
        (tmp_path / f"edited_{name}").write_text(edit(VALID[name]), encoding="utf-8", newline="")
    edited = load_files(tmp_path / "edited_edges.csv", tmp_path / "edited_feats.csv", tmp_path / "edited_labels.csv",
                        name="edges")
    same_graph(edited, plain)


@pytest.mark.parametrize("header", ["src dst", "SRC\tDST", "dst src"])
def test_a_whitespace_edge_list_header_is_not_two_nodes(header, tmp_path):
    body = "".join(f"{i} {(i + 1) % N}\n" for i in range(N))
    (tmp_path / "plain.txt").write_text(body)
    (tmp_path / "headed.txt").write_text(header + "\n" + body)
    (tmp_path / "l.csv").write_text(VALID["labels_int.csv"])
    plain = load_files(tmp_path / "plain.txt", None, tmp_path / "l.csv")
    headed = load_files(tmp_path / "headed.txt", None, tmp_path / "l.csv")
    assert headed.labels.size == N and "src" not in set(headed.node_ids)
    if header.lower().startswith("src"):
        same_graph(headed, plain._replace(name="headed"))
    else:  # the header's order decides which column is which
        np.testing.assert_array_equal(headed.senders, plain.receivers)


def test_class_errors_name_the_class():
    labels = np.array([0] * 30 + [1] * 3 + [2] * 30)
    with pytest.raises(ValueError, match=r"class 'gamma' has|class 'beta' has 3 labelled nodes"):
        planetoid_split(labels, per_class=5, class_names=["alpha", "beta", "gamma"])


def test_library_boundaries_refuse_absurd_node_ids_and_bad_sparse_structures():
    with pytest.raises(ValueError, match=r"edges: node id 9,999,999,999,999 .* means 10,000,000,000,000 nodes"):
        from_edges([0], [10**13 - 1])
    with pytest.raises(ValueError, match=r"edges: edge weight 1e\+39 at position 0 overflows float32"):
        from_edges([0], [1], [1e39])
    from jaxgcn.core.layers import sparse_features

    for column in (7, 3):  # 3: the first index past the end
        bad = sp.csr_matrix(np.eye(3, dtype=np.float32))
        bad.indices[1] = column
        for layout in ("bcoo", "csr"):
            with pytest.raises(ValueError, match=rf"sparse_features: column index {column} \(stored entry 1\) is "
                                                 r"outside \[0, 3\)"):
                sparse_features(bad, layout=layout)


# --- property-based: the loaders never crash -----------------------------------------------------------

FUZZ = settings(max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def load_or_refuse(edges: Path, features: Path | None, labels: Path) -> None:
    """Load and prepare on the host; a ValueError is the only acceptable failure."""
    try:
        graph = load_files(edges, features, labels)
    except ValueError:
        return
    try:
        prepare(graph, backend="segment", on_device=False, require_split=False)
    except ValueError:
        pass


ROLES = {"edges.csv": "edges", "edges.txt": "edges", "feats.csv": "features", "trip.csv": "features",
         "labels.csv": "labels"}


def load_with(d: Path, replaced: str) -> None:
    files = {"edges": d / "edges.csv", "features": d / "feats.csv", "labels": d / "labels.csv"}
    files[ROLES[replaced]] = d / f"fuzz_{replaced}"
    load_or_refuse(files["edges"], files["features"], files["labels"])


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    write_valid(d)
    return d


@FUZZ
@given(which=st.sampled_from(sorted(ROLES)), data=st.binary(max_size=300))
def test_random_bytes_never_crash_the_loaders(fuzz_dir, which, data):
    (fuzz_dir / f"fuzz_{which}").write_bytes(data)
    load_with(fuzz_dir, which)


PIECES = [",", "\n", "\r\n", " ", "\t", '"', "\ufeff", "é", "\x00", "-", ".", "e", "0", "1", "9", "n1", "n2", "src",
          "dst", "node", "label", "weight", "feature", "value", "nan", "inf", "1e39", "-3", "99999999999999999999",
          "1099511627776", "alpha"]
MUTATION = st.tuples(st.sampled_from(["insert", "delete", "replace", "duplicate-line", "truncate"]),
                     st.integers(0, 10**6), st.integers(0, 30),
                     st.lists(st.sampled_from(PIECES), max_size=4).map("".join))


def mutate(text_: str, mutations: list[tuple[str, int, int, str]]) -> str:
    for kind, at, length, piece in mutations:
        at %= len(text_) + 1
        if kind == "insert":
            text_ = text_[:at] + piece + text_[at:]
        elif kind == "delete":
            text_ = text_[:at] + text_[at + length:]
        elif kind == "replace":
            text_ = text_[:at] + piece + text_[at + len(piece):]
        elif kind == "duplicate-line":
            lines = text_.split("\n")
            k = at % len(lines)
            text_ = "\n".join(lines[:k + 1] + lines[k:])
        else:
            text_ = text_[:at]
    return text_


@FUZZ
@given(which=st.sampled_from(sorted(ROLES)), mutations=st.lists(MUTATION, min_size=1, max_size=4),
       encoding=st.sampled_from(["utf-8", "latin-1"]))
def test_mutated_csv_files_load_or_raise_value_error(fuzz_dir, which, mutations, encoding):
    (fuzz_dir / f"fuzz_{which}").write_bytes(mutate(VALID[which], mutations).encode(encoding, "replace"))
    load_with(fuzz_dir, which)


@FUZZ
@given(suffix=st.sampled_from([".npz", ".npy"]), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                                                min_size=1, max_size=6), cut=st.integers(0, 10**6))
def test_corrupted_npz_and_npy_features_load_or_raise_value_error(fuzz_dir, suffix, flips, cut):
    data = bytearray((fuzz_dir / f"x{suffix}").read_bytes())
    for at, value in flips:
        data[at % len(data)] = value
    if cut % 3 == 0:
        data = data[: cut % len(data)]
    path = fuzz_dir / f"fuzz{suffix}"
    path.write_bytes(bytes(data))
    try:
        _, x = read_features(path)
    except ValueError:
        return
    if sp.issparse(x):  # whatever loaded is a valid structure
        from jaxgcn.core.validate import check_sparse

        check_sparse(x, "fuzz")


@pytest.fixture(scope="module")
def planetoid_pickles() -> dict[str, bytes]:
    return {part: pickle.dumps(obj, protocol=4) for part, obj in planetoid_parts().items() if part != "test.index"}


@FUZZ
@given(part=st.sampled_from(["allx", "tx", "ally", "graph", "y"]),
       flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4))
def test_corrupted_planetoid_pickles_load_or_raise_value_error(tmp_path_factory, planetoid_pickles, part, flips):
    d = tmp_path_factory.getbasetemp() / "planetoid_fuzz"
    if not d.exists():
        d.mkdir()
        write_planetoid(d)
    data = bytearray(planetoid_pickles[part])
    for at, value in flips:
        data[at % len(data)] = value
    path = d / "planetoid" / f"ind.tiny.{part}"
    path.write_bytes(bytes(data))
    try:
        safe_load_pickle(path)
        load_raw(d / "planetoid", "tiny")
    except ValueError:
        pass
    finally:
        path.write_bytes(planetoid_pickles[part])


def test_a_pickled_dtype_state_never_reaches_numpys_own_dtypes(tmp_path):
    """A pickle's dtype state is checked on a stand-in, not set on NumPy's one float32 dtype: this
    malformed state (one None dropped, found by the fuzz test above) crashed the interpreter."""
    good = pickle.dumps(np.arange(3, dtype=np.float32), protocol=4)
    at = good.index(b"NNN")  # the dtype state's (subarray, names, fields)
    path = tmp_path / "ind.tiny.x"
    path.write_bytes(good[:at] + b"N0N" + good[at + 3:])  # "0": POP, one None fewer
    np.testing.assert_array_equal(safe_load_pickle(path), [0.0, 1.0, 2.0])
    assert np.dtype("f4").isnative and (np.ones(2, np.float32) * 2).tolist() == [2.0, 2.0]
    path.write_bytes(good[:at - 4] + b"M\x07\x00" + good[at - 1:])  # the byte order "<" replaced by the number 7
    with pytest.raises(ValueError, match="not a readable Planetoid pickle .malformed dtype state"):
        safe_load_pickle(path)


def test_a_corrupted_memo_index_is_refused_before_the_unpickler_runs(tmp_path):
    # the C unpickler would grow its memo table to 50M entries (400 MB) for this one byte string
    path = tmp_path / "ind.tiny.graph"
    path.write_bytes(b"\x80\x04]r" + (50_000_000).to_bytes(4, "little") + b".")  # [], LONG_BINPUT 50M
    with pytest.raises(ValueError, match=r"ind.tiny.graph: not a readable Planetoid pickle \(memo index 50,000,000 "
                                         r"of a pickle of 4 opcodes\)"):
        safe_load_pickle(path)
