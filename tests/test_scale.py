"""Large-graph support: OGB raw and npz loaders, memory planning, the aggregate-first layer."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from cli_run import unwrap

from jaxgcn import datasets
from jaxgcn.cli import main
from jaxgcn.datasets.ogb import load_arrays, load_ogb
from jaxgcn.host.memory import GiB, MemoryEstimate, check_fits, estimate
from jaxgcn.core.models import Execution, GCNConfig, gcn


def write_gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


def ogb_fixture(root: Path, *, n=40, n_classes=3, features=True, labels=None, edges=None) -> Path:
    """A small OGB node-property dataset in the raw layout OGB ships (header-less gzip CSVs)."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, n_classes, n) if labels is None else labels
    edges = np.stack([rng.integers(0, n, 120), rng.integers(0, n, 120)], 1) if edges is None else edges
    write_gz(root / "raw" / "edge.csv.gz", edges)
    write_gz(root / "raw" / "node-label.csv.gz", labels)
    write_gz(root / "raw" / "num-node-list.csv.gz", [n])
    if features:
        write_gz(root / "raw" / "node-feat.csv.gz", np.round(rng.standard_normal((n, 5)), 4))
    perm = rng.permutation(n)
    for name, part in (("train", perm[:20]), ("valid", perm[20:30]), ("test", perm[30:])):
        write_gz(root / "split" / "time" / f"{name}.csv.gz", part)
    return root


def test_ogb_loader_reads_the_raw_layout(tmp_path):
    root = ogb_fixture(tmp_path / "ogbn_tiny")
    raw = load_ogb(root)
    assert raw.name == "ogb:ogbn_tiny" and raw.features.shape == (40, 5) and raw.features.dtype == np.float32
    assert raw.senders.shape == (120,) and raw.labels.dtype == np.int32
    assert {k: len(v) for k, v in raw.splits.items()} == {"train": 20, "val": 10, "test": 10}
    with gzip.open(root / "raw" / "edge.csv.gz", "rt") as f:
        first = [int(v) for v in f.readline().split(",")]
    assert [int(raw.senders[0]), int(raw.receivers[0])] == first
    prepared = datasets.prepare(raw)
    assert prepared.info["n_nodes"] == 40 and prepared.n_classes == 3


def test_ogb_featureless_graph_gets_one_hot_features_and_nan_labels_are_unlabelled(tmp_path):
    labels = np.array([0, 1, 2] * 13 + [np.nan], dtype=object)
    raw = load_ogb(ogb_fixture(tmp_path / "d", features=False, labels=labels))
    assert sp.issparse(raw.features) and raw.features.shape == (40, 40)
    assert raw.labels[-1] == -1 and raw.labels[:3].tolist() == [0, 1, 2]


def test_ogb_errors_name_the_file_and_line(tmp_path):
    root = ogb_fixture(tmp_path / "bad", edges=np.array([[0, 1], [2, 40]]))
    with pytest.raises(ValueError, match=r"edge\.csv\.gz: line 2 has node id \[2, 40\] outside \[0, 40\)"):
        load_ogb(root)
    root = ogb_fixture(tmp_path / "text")
    write_gz(root / "raw" / "node-feat.csv.gz", [[1, 2, 3, 4, 5]] * 3 + [["a", 2, 3, 4, 5]])
    with pytest.raises(ValueError, match=r"node-feat\.csv\.gz: could not convert string 'a' to float32 at line 4, "
                                         r"column 1; the file must hold comma-separated numbers, no header"):
        load_ogb(root)
    root = ogb_fixture(tmp_path / "two")
    with pytest.raises(ValueError, match=r"not a directory"):
        load_ogb(tmp_path / "missing")
    (root / "split" / "other").mkdir()
    with pytest.raises(ValueError, match=r"^split=None: .*several splits \(other, time\); name the one to use"):
        load_ogb(root)
    assert load_ogb(root, split="time").splits["val"].size == 10


def test_cli_trains_an_ogb_directory(tmp_path, capsys):
    root = ogb_fixture(tmp_path / "ogbn_tiny")
    assert main(["train", "--dataset", f"ogb:{root}", "--epochs", "5", "--no-compile-cache"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ogb:ogbn_tiny: 40 nodes")
    assert re.search(r"^memory estimate \d+\.\d\d GiB \(.*\) of \d+\.\d GiB available( on .+ \(\w+:\d+\))?$", out, re.M)


def test_npz_loader_reads_arrays_and_draws_a_split_when_none_is_given(tmp_path):
    rng = np.random.default_rng(3)
    adj = sp.random(200, 200, density=0.02, random_state=3, format="csr")
    adj.data[:] = 1.0
    sp.save_npz(tmp_path / "adjacency.npz", adj)
    np.save(tmp_path / "features.npy", rng.standard_normal((200, 4)).astype(np.float32))
    np.save(tmp_path / "labels.npy", np.arange(200) % 3)
    raw = datasets.load_dataset(f"npz:{tmp_path}")
    assert raw.features.shape == (200, 4) and raw.senders.size == adj.nnz and raw.weights is None
    coo = adj.tocoo()
    assert sorted(zip(raw.receivers.tolist(), raw.senders.tolist())) == sorted(zip(coo.row.tolist(), coo.col.tolist()))
    sizes = {k: len(v) for k, v in raw.splits.items()}
    assert sizes["train"] == 60 and sizes["val"] > 0 and sizes["test"] > 0  # 20 per class, drawn
    assert datasets.prepare(raw).info["n_nodes"] == 200
    np.savez(tmp_path / "splits.npz", train=np.arange(10), val=np.arange(10, 20), test=np.arange(20, 40))
    raw = load_arrays(tmp_path)
    assert raw.splits["test"].tolist() == list(range(20, 40))
    np.save(tmp_path / "labels.npy", np.zeros(59, np.int64))
    with pytest.raises(ValueError,
                       match=r"adjacency has 200 nodes but features have 200 rows and labels shape \(59,\)"):
        load_arrays(tmp_path)


def test_memory_estimate_parts():
    est = estimate(1000, 10_000, 50, 4, hidden=32, backend="segment")
    assert est.parts["messages"] == 2 * 10_000 * 32 * 4
    chunked = estimate(1000, 10_000, 50, 4, hidden=32, backend="segment", chunk_edges=1000)
    assert chunked.parts["messages"] == 2 * 1000 * 32 * 4 and chunked.total < est.total
    csr = estimate(1000, 10_000, 50, 4, hidden=32, backend="csr")
    assert csr.parts["messages"] == 0
    assert estimate(1000, 10_000, 50, 4, backend="csr", symmetric=False).parts["adjacency"] > csr.parts["adjacency"]
    one = estimate(1000, 10_000, 50, 4).parts["activations"]
    assert estimate(1000, 10_000, 50, 4, runs=4).parts["activations"] == 4 * one
    assert estimate(100_000, 0, 8, 2, backend="dense").parts["adjacency"] == 4 * 10**10


def test_check_fits_names_the_estimate_and_the_options():
    est = MemoryEstimate({"features": 0, "adjacency": GiB, "messages": 20 * GiB, "activations": GiB,
                          "params": 0, "runtime": 0}, 22 * GiB)
    with pytest.raises(ValueError, match=r"training needs about 22\.00 GiB \(adjacency 1\.00, messages 20\.00, "
                                         r"activations 1\.00\), more than the 8\.0 GiB available; options: "
                                         r"--backend csr .* or --chunk-edges N with --backend segment"):
        check_fits(est, 8 * GiB)
    check_fits(est, 32 * GiB)  # fits: no error


def test_million_node_dense_request_is_refused_with_the_estimate(tmp_path):
    raw = datasets.synthetic(2000, n_classes=2, n_features=4, avg_degree=2, seed=0)
    import jaxgcn.datasets.loading as ds  # where prepare looks it up (jaxgcn.datasets is its lazy face)

    original = ds.available_bytes
    ds.available_bytes = lambda: 20 * 2**20  # 20 MiB: a 2,000-node dense adjacency (15 MiB) > half
    try:
        with pytest.raises(ValueError, match=r"^backend='dense': .* needs a 2,000 x 2,000 adjacency, 0\.0 GiB, more "
                                             r"than half the 0\.0 GiB available; use backend='auto'"):
            datasets.prepare(raw, backend="dense")
    finally:
        ds.available_bytes = original


def test_cli_refuses_a_run_that_cannot_fit(monkeypatch, capsys):
    import jaxgcn.host.memory

    monkeypatch.setattr(jaxgcn.host.memory, "available_bytes", lambda: 2**20)
    # On an accelerator the check is against its free memory (a 300-node run needs well under 1 MiB there):
    # 1 KiB of it, named as the host's, so the same message applies.
    if jax.default_backend() != "cpu":
        monkeypatch.setattr(jaxgcn.host.memory, "device_budget", lambda device=None: jaxgcn.host.memory.Budget(2**10))
    code = main(["train", "--dataset", "synthetic", "--nodes", "300", "--epochs", "2", "--no-compile-cache"])
    assert code == 2
    err = unwrap(capsys.readouterr().err)
    assert re.match(r"jaxgcn: error: training needs about \d+\.\d\d GiB .* more than the 0\.0 GiB available; "
                    r"options:", err)


@pytest.mark.parametrize("backend", ["csr", "segment"])
def test_aggregate_first_equals_transform_first(backend):
    prepared = datasets.prepare(datasets.synthetic(300, n_classes=3, n_features=6, seed=2), backend=backend)
    key = jax.random.key(4)
    outs, grads = [], []
    for first in (False, True):
        model = gcn(GCNConfig(hidden=16), Execution(backend=backend, aggregate_first=first))
        params = model.init(jax.random.key(0), 6, 3)

        def loss(p):
            return jnp.sum(jnp.tanh(model.apply(p, prepared.data.graph, prepared.data.x, key=key, train=True)))

        outs.append(model.apply(params, prepared.data.graph, prepared.data.x, key=key, train=True))
        grads.append(jax.grad(loss)(params))
    np.testing.assert_allclose(np.asarray(outs[1]), np.asarray(outs[0]), rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves(grads[1]), jax.tree.leaves(grads[0])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_chunk_edges_needs_the_segment_backend():
    with pytest.raises(ValueError, match=r"chunk_edges=10 needs the segment backend .* \(backend is 'csr'"):
        Execution(backend="csr", chunk_edges=10)
    assert Execution(backend="segment", chunk_edges=10).chunk_edges == 10


def test_cli_chunked_segment_run_equals_unchunked(capsys):
    base = ["train", "--dataset", "synthetic", "--nodes", "300", "--epochs", "10", "--backend", "segment",
            "--early-stopping", "none", "--no-compile-cache", "--quiet"]
    assert main(base) == 0
    whole = capsys.readouterr().out
    assert main([*base, "--chunk-edges", "500"]) == 0
    assert capsys.readouterr().out.split("|")[0] == whole.split("|")[0]  # the same test accuracy line


def test_large_synthetic_graph_is_generated_vectorized():
    raw = datasets.synthetic(200_000, n_classes=47, n_features=8, avg_degree=25, seed=0)
    assert raw.senders.size == 2_500_000 and raw.features.shape == (200_000, 8)
    assert raw.labels.max() == 46



@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU plan's runs per program (runs_per_device_for); "
                    "an accelerator's are what its memory holds (test_accelerator_plan: accelerator_runs)")
@pytest.mark.parametrize(("args", "n_runs", "hidden", "runs"), [
    ([], 1, 16, 1), (["--seeds", "3"], 3, 16, 3),
    (["--seeds", "16"], 16, 16, 16),  # hidden 16: fit_runs puts 16 runs in one program (it planned for 8)
    (["--seeds", "20"], 20, 16, 16),  # two slices of 16, the second padded: 16 at a time
    (["--seeds", "6", "--hidden", "64"], 6, 64, 4),  # 256 floats per row: 4 runs of width 64
    (["--seeds", "2", "--splits", "3", "--split", "random"], 6, 16, 6),
])
def test_the_memory_check_plans_for_the_runs_that_execute_together(monkeypatch, capsys, args, n_runs, hidden, runs):
    import jaxgcn.app.data  # noqa: F401 - imported before the patch, so that its own `estimate` stays the real one
    import jaxgcn.host.memory as memory
    from jaxgcn.batched import runs_per_program

    planned = []
    real = memory.estimate

    def recording(*a, **kw):
        planned.append(kw["runs"])
        return real(*a, **kw)
    monkeypatch.setattr(memory, "estimate", recording)
    monkeypatch.setattr(memory, "available_bytes", lambda: 1)  # refused after the estimate: nothing compiles
    data = ["--dataset", "synthetic", "--nodes", "300", "--classes", "3", "--features", "8"]
    assert main(["train", *data, *args, "--no-compile-cache"]) == 2
    assert "more than the 0.0 GiB available" in capsys.readouterr().err
    assert planned == [runs]
    assert runs_per_program(n_runs, hidden, Execution(backend="csr")) == runs


def _one_way_ring(n: int):
    from jaxgcn.datasets.base import RawGraph

    senders = np.concatenate([np.arange(n), np.arange(10)])
    receivers = np.concatenate([(np.arange(n) + 1) % n, (np.arange(10) + 7) % n])
    return RawGraph("ring", senders, receivers, np.eye(n, dtype=np.float32)[:, :8], (np.arange(n) % 2).astype(np.int32),
                    {"train": np.arange(4), "val": np.arange(4, 8), "test": np.arange(8, 20)})


@pytest.mark.parametrize("symmetrize", [True, False])
def test_the_csr_adjacency_estimate_is_what_the_prepared_graph_holds(symmetrize):
    # a directed graph (--no-symmetrize, or norm=row) keeps the transposed pattern for the backward
    # pass (pointers, rows, permutation) and gathers the values into that order: the estimate counts
    # exactly those bytes, as `jaxgcn info` and the training plan report them
    from jaxgcn import plan
    from jaxgcn.app.data import Loaded, memory_estimate

    p = datasets.prepare(_one_way_ring(40), symmetrize=symmetrize, backend="csr", on_device=False)
    graph = p.data.graph
    assert graph.csr.symmetric == symmetrize and graph.n_edges == (100 if symmetrize else 50)
    held = sum(a.nbytes for a in graph.csr if a is not None) + graph.self_weights.nbytes
    gathered = 0 if symmetrize else 4 * graph.n_edges  # vals[t_perm] in the backward pass
    assert memory_estimate(Loaded(p, None), 16, None).parts["adjacency"] == held + gathered
    planned = plan.resolve(Execution(backend="csr"), p.data, GCNConfig(), p.n_classes)
    if planned.execution.backend == "csr":  # the kernel built here (tests/test_csr.py says why not)
        assert planned.memory.parts["adjacency"] == held + gathered
