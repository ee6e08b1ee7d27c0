"""Hyperparameter sweeps (jaxgcn.sweep) and the batched CLI (``train --seeds``, ``sweep``).

The data is the synthetic graph the CLI builds from ``--dataset synthetic --nodes 300 --classes 3
--features 16`` (seed 0), and the configurations are the CLI's defaults with ``--epochs 30``, so
the programs compiled by the library tests are reused by the CLI tests (~5 s per compile).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re

import jax
import numpy as np
import pytest

from jaxgcn import datasets
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.plan import batch_bytes as estimate_bytes
from jaxgcn.sweep import (GRID_KEYS, Entry, Grid, format_table, grid_values, lower, program_key,
                          rows_to_json, run_entries, run_grid, write_csv)
from jaxgcn.train import Patience, TrainConfig, fit
from cli_run import run_main, unwrap

MODEL = GCNConfig()
# what auto picks here (an accelerator: Â on its MXU)
EXEC = Execution(backend="csr" if jax.default_backend() == "cpu" else "dense")
BASE = TrainConfig(epochs=30)
GRID = Grid(lr=(0.01, 0.05), hidden=(8, 16), layers=(2, 3))
SEEDS = [0, 1]
DATA_ARGS = ["--dataset", "synthetic", "--nodes", "300", "--classes", "3", "--features", "16"]
CLI = [*DATA_ARGS, "--epochs", "30", "--no-compile-cache", "--quiet"]
CSV_FIELDS = [*GRID_KEYS, "n_runs", "val_acc_mean", "val_acc_std", "test_acc_mean", "test_acc_std", "epochs_mean"]
GROUP = re.compile(r"^group (\d+)/(\d+) \(layers (\d+), (?:\w+), hidden (\d+)\): (\d+) runs in one program \| "
                   r"compile \d+\.\ds \| train \d+\.\ds \| val mean (\d\.\d{4})$")
START = re.compile(r"^group (\d+)/(\d+) \(layers (\d+), (?:\w+), hidden (\d+)\): training (\d+) runs?$")


def finished(lines):
    """The lines that end a group (each group also says when it starts: START)."""
    return [line for line in lines if not START.match(line)]




@pytest.fixture(scope="module")
def prepared():
    p = datasets.prepare(datasets.synthetic(300, n_classes=3, n_features=16, seed=0))
    assert p.backend == EXEC.backend and p.n_classes == 3
    return p


@pytest.fixture(scope="module")
def single(prepared):
    """``single(model_config, config, seed)`` -> memoized ``fit`` result on ``prepared``."""
    cache = {}

    def run(model_config, config, seed):
        key = (model_config, config, seed)
        if key not in cache:
            cache[key] = fit(prepared.data, prepared.n_classes, model_config=model_config, execution=EXEC,
                             config=config, key=jax.random.key(seed), log=None)
        return cache[key]
    return run


@pytest.fixture(scope="module")
def swept(prepared):
    lines = []
    rows = run_grid(prepared.data, prepared.n_classes, GRID, SEEDS, model_config=MODEL, execution=EXEC, config=BASE,
                    log=lines.append)
    return rows, lines


def find(rows, **config):
    matches = [r for r in rows if all(r.config[k] == v for k, v in config.items())]
    assert len(matches) == 1, config
    return matches[0]


# --- run_grid ------------------------------------------------------------------------------------------


def test_run_grid_rows_summarize_their_runs_best_first(swept):
    rows, _ = swept
    assert len(rows) == 8
    assert sorted((r.config["lr"], r.config["hidden"], r.config["layers"]) for r in rows) == sorted(
        (c["lr"], c["hidden"], c["layers"]) for c in GRID.configs())
    for r in rows:
        assert r.config["weight_decay"] == 5e-4 and r.config["dropout"] == 0.5
        assert r.n_runs == 2 and [(run["seed"], run["split"]) for run in r.runs] == [(0, 0), (1, 0)]
        val = np.array([run["val_acc"] for run in r.runs])
        test = np.array([run["test_acc"] for run in r.runs])
        assert r.val_mean == pytest.approx(val.mean(), abs=1e-12) and r.val_std == pytest.approx(val.std(), abs=1e-12)
        assert r.test_mean == pytest.approx(test.mean(), abs=1e-12)
        assert r.test_std == pytest.approx(test.std(), abs=1e-12)
        assert r.epochs_mean == pytest.approx(np.mean([run["epochs_run"] for run in r.runs]))
        assert all(1 <= run["epochs_run"] <= BASE.epochs for run in r.runs)
    keys = [(-r.val_mean, -r.test_mean) for r in rows]
    assert keys == sorted(keys)
    assert rows[0].val_mean > 0.8  # 3 homophilous classes: chance is 1/3
    assert len({(r.val_mean, r.test_mean) for r in rows}) > 1  # the configurations differ


def test_run_grid_compiles_one_program_per_layer_count_and_width(swept):
    rows, lines = swept
    groups = [GROUP.match(line) for line in finished(lines)]
    assert all(groups), lines  # no chunking line: the default budget is half the free memory
    # every group says when it starts (a sweep is not silent while a group trains), then how it ended
    assert [line for line in lines if START.match(line)] == [
        f"group {g}/4 (layers {layers}, adam, hidden {hidden}): training 4 runs"
        for g, (layers, hidden) in enumerate([(2, 8), (2, 16), (3, 8), (3, 16)], 1)]
    assert [bool(START.match(line)) for line in lines] == [True, False] * 4
    # one program per (layers, hidden): padding every run to the widest made each cost the widest
    assert [(m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)) for m in groups] == [
        ("1", "4", "2", "8", "4"), ("2", "4", "2", "16", "4"), ("3", "4", "3", "8", "4"), ("4", "4", "3", "16", "4")]
    for m in groups:  # the logged mean is the mean over that group's runs
        runs = [run["val_acc"] for r in rows if r.config["layers"] == int(m.group(3))
                and r.config["hidden"] == int(m.group(4)) for run in r.runs]
        assert m.group(6) == f"{np.mean(runs):.4f}"


def test_run_grid_row_equals_single_runs(swept, single):
    rows, _ = swept
    # The least default row: 8 hidden units, its own lr, and 3 layers.
    row = find(rows, lr=0.05, hidden=8, layers=3)
    for run in row.runs:
        one = single(dataclasses.replace(MODEL, hidden=8, layers=3), dataclasses.replace(BASE, lr=0.05), run["seed"])
        assert run["val_acc"] == pytest.approx(one.metrics["val_acc"], abs=1e-6)
        assert run["test_acc"] == pytest.approx(one.metrics["test_acc"], abs=1e-6)
        assert run["epochs_run"] == one.epochs_run


def test_memory_budget_splits_a_group_into_chunks_with_the_same_results(prepared, swept):
    rows, _ = swept
    grid = Grid(lr=(0.01, 0.05), hidden=(16,))  # the layers-2, hidden-16 group of GRID: 4 runs
    per_run = estimate_bytes(prepared.data, dataclasses.replace(MODEL, hidden=16), 1, prepared.n_classes, EXEC)
    lines = []
    chunked = run_grid(prepared.data, prepared.n_classes, grid, SEEDS, model_config=MODEL, execution=EXEC, config=BASE,
                       memory_budget=2 * per_run, log=lines.append)
    assert lines[0].startswith("group 1: 4 runs need ~") and lines[0].endswith("running 2 chunks of <= 2 runs")
    assert lines[1] == "group 1/1 (layers 2, adam, hidden 16): training 4 runs"
    assert [m.group(5) for m in map(GROUP.match, lines[2:])] == ["2", "2"]
    assert len(chunked) == 2
    for r in chunked:
        whole = find(rows, lr=r.config["lr"], hidden=r.config["hidden"], layers=2)
        assert [run["seed"] for run in r.runs] == SEEDS
        for a, b in zip(r.runs, whole.runs):
            assert a["val_acc"] == pytest.approx(b["val_acc"], abs=1e-6)
            assert a["test_acc"] == pytest.approx(b["test_acc"], abs=1e-6)
            assert a["epochs_run"] == b["epochs_run"]


def test_processes_each_run_a_share_and_combine_to_the_whole_table(prepared, swept):
    # What `sweep --distributed` does with jax.distributed, with the two processes played in turn:
    # each runs every 2nd run of each group; the combined table equals the one-process sweep.
    # Two of GRID's groups (layers 2, hidden 8 and 16: 4 runs each) show it; the 3-layer groups
    # would only compile the same split twice more.
    rows, _ = swept
    grid = Grid(lr=GRID.lr, hidden=GRID.hidden, layers=(2,))
    captured = {}

    def first(local):
        captured[1] = local.copy()
        done = local.copy()
        done[:, 3] = 1.0  # let this half return; its rows are checked through process 0 below
        return done

    run_grid(prepared.data, prepared.n_classes, grid, SEEDS, model_config=MODEL, execution=EXEC, config=BASE, log=None,
             process_index=1, process_count=2, combine=first)
    shared = run_grid(prepared.data, prepared.n_classes, grid, SEEDS, model_config=MODEL, execution=EXEC, config=BASE,
                      log=None, process_index=0, process_count=2, combine=lambda local: local + captured[1])
    # a combine that drops the other process's runs is refused (one group of the grid shows it, with
    # its 2 runs per process: the program process 1 compiled above)
    with pytest.raises(RuntimeError, match=r"runs have no result \(process 0 of 2"):
        run_grid(prepared.data, prepared.n_classes, Grid(lr=GRID.lr, hidden=(8,), layers=(2,)), SEEDS,
                 model_config=MODEL, execution=EXEC, config=BASE, log=None, process_index=0, process_count=2,
                 combine=lambda local: local)
    n_runs = len(grid.configs()) * len(SEEDS)
    assert n_runs == 8 and captured[1][:, 3].sum() == n_runs // 2  # process 1 ran half of the runs
    assert len(shared) == 4 and {r.config["hidden"] for r in shared} == {8, 16}
    for r in shared:
        whole = find(rows, **r.config)
        for a, b in zip(r.runs, whole.runs):
            assert (a["seed"], a["epochs_run"]) == (b["seed"], b["epochs_run"])
            assert a["test_acc"] == pytest.approx(b["test_acc"], abs=1e-6)


def test_estimate_bytes_is_linear_in_runs_and_grows_with_width(prepared):
    one = estimate_bytes(prepared.data, MODEL, 1, 3, EXEC)
    assert one > 0 and estimate_bytes(prepared.data, MODEL, 7, 3, EXEC) == 7 * one
    assert estimate_bytes(prepared.data, dataclasses.replace(MODEL, hidden=64), 1, 3, EXEC) > one


def test_grid_configs_cross_every_value_and_reject_empty_lists():
    configs = GRID.configs()
    assert len(configs) == 8 and all(set(c) == set(GRID_KEYS) for c in configs)
    assert len({tuple(c.values()) for c in configs}) == 8
    with pytest.raises(ValueError, match="--weight-decay: give at least one value"):
        Grid(weight_decay=()).configs()


# --- entries: lower and run_entries -------------------------------------------------------------------


def test_lower_writes_every_grid_value_into_its_config_field():
    base_model = dataclasses.replace(MODEL, residual=True)
    base_train = dataclasses.replace(BASE, l2="all")
    grid = Grid(lr=(0.01, 0.05), weight_decay=(0.0, 1e-3), dropout=(0.0, 0.3), hidden=(8,), layers=(2, 3),
                optimizer=("adam", "sgd"))
    entries = lower(grid, [4, 7], 3, model_config=base_model, config=base_train)
    configs = grid.configs()
    assert len(entries) == len(configs) * 2 * 3 == 192 and all(isinstance(e, Entry) for e in entries)
    for i, values in enumerate(configs):  # configuration-major, then seed, then split
        block = entries[6 * i:6 * i + 6]
        assert [(e.seed, e.split) for e in block] == [(s, k) for s in (4, 7) for k in range(3)]
        for e in block:
            assert (e.train.lr, e.train.weight_decay, e.train.optimizer) == (
                values["lr"], values["weight_decay"], values["optimizer"])
            assert (e.model.dropout, e.model.hidden, e.model.layers) == (
                values["dropout"], values["hidden"], values["layers"])
            # everything else is the base configs'
            assert e.model == dataclasses.replace(base_model, dropout=e.model.dropout, hidden=8, layers=e.model.layers)
            assert e.train == dataclasses.replace(base_train, lr=e.train.lr, weight_decay=e.train.weight_decay,
                                                  optimizer=e.train.optimizer)
            assert grid_values(e) == values
    assert base_model.hidden == 16 and base_train.lr == 0.01  # the bases are copied, not changed


@pytest.mark.parametrize("grid, seeds, n_splits, match", [
    (Grid(), [], 1, r"seeds: give at least one seed"),
    (Grid(), [0], 0, r"n_splits=0: a sweep needs at least 1 split"),
    (Grid(hidden=(16, 0)), [0], 1, r"hidden=0: the hidden width must be >= 1"),
    (Grid(optimizer=("adam", "rmsprop")), [0], 1, r"optimizer='rmsprop' must be one of"),
], ids=["no_seeds", "no_splits", "bad_hidden", "bad_optimizer"])
def test_lower_rejects_what_no_run_can_use(grid, seeds, n_splits, match):
    with pytest.raises(ValueError, match=match):
        lower(grid, seeds, n_splits, model_config=MODEL, config=BASE)


def test_program_key_ignores_only_the_per_run_fields():
    (e,) = lower(Grid(), [0], model_config=MODEL, config=BASE)
    same = [e._replace(model=dataclasses.replace(e.model, dropout=0.1)),
            e._replace(train=dataclasses.replace(e.train, lr=0.2, weight_decay=0.0)), e._replace(seed=5, split=2)]
    assert all(program_key(x) == program_key(e) for x in same)
    other = [e._replace(train=dataclasses.replace(e.train, epochs=20)),
             e._replace(train=dataclasses.replace(e.train, l2="all")),
             e._replace(train=dataclasses.replace(e.train, early_stopping=Patience(5))),
             e._replace(model=dataclasses.replace(e.model, layers=3)),
             e._replace(model=dataclasses.replace(e.model, hidden=64)),  # its own program: no padding to the widest
             e._replace(model=dataclasses.replace(e.model, bias=True))]
    assert len({program_key(x) for x in [e, *other]}) == 1 + len(other)
    # With layer norm the width is part of the parameters' structure: other widths, other programs.
    norm = e._replace(model=dataclasses.replace(e.model, layer_norm=True))
    assert program_key(norm) != program_key(norm._replace(model=dataclasses.replace(norm.model, hidden=8)))
    assert program_key(norm) == program_key(norm._replace(model=dataclasses.replace(norm.model, dropout=0.1)))


def test_entries_differing_in_epochs_run_as_two_programs_each_equal_to_its_single_run(prepared, single):
    (e,) = lower(Grid(), [0], model_config=MODEL, config=BASE)
    entries = [e._replace(train=dataclasses.replace(e.train, epochs=12)), e]
    lines = []
    outcomes = run_entries(prepared.data, prepared.n_classes, entries, execution=EXEC, log=lines.append)
    assert [(m.group(1), m.group(2), m.group(5)) for m in map(GROUP.match, finished(lines))] == [("1", "2", "1"),
                                                                                                ("2", "2", "1")]
    assert lines[0] == "group 1/2 (layers 2, adam, hidden 16): training 1 run"
    assert outcomes[0].epochs_run <= 12  # the shorter run stopped at its own epochs
    for entry, outcome in zip(entries, outcomes):  # in the order of the entries
        one = single(entry.model, entry.train, entry.seed)
        assert outcome.val_acc == pytest.approx(one.metrics["val_acc"], abs=1e-6)
        assert outcome.test_acc == pytest.approx(one.metrics["test_acc"], abs=1e-6)
        assert outcome.epochs_run == one.epochs_run


def test_a_weight_decay_list_starting_at_zero_keeps_the_l2_term_of_the_other_runs(prepared, single):
    # The program's own config used to carry the FIRST weight decay; at 0 the batched step left the
    # L2 term out for every run of the program, 5e-2 included.
    base = dataclasses.replace(BASE, weight_decay=0.0)
    rows = run_grid(prepared.data, prepared.n_classes, Grid(weight_decay=(0.0, 5e-2)), [0], model_config=MODEL,
                    execution=EXEC, config=base, log=None)
    for r in rows:
        one = single(MODEL, dataclasses.replace(base, weight_decay=r.config["weight_decay"]), 0)
        assert r.runs[0]["val_acc"] == pytest.approx(one.metrics["val_acc"], abs=1e-6)
        assert r.runs[0]["test_acc"] == pytest.approx(one.metrics["test_acc"], abs=1e-6)
    assert len({r.runs[0]["val_acc"] for r in rows}) == 2


def test_run_entries_on_part_of_a_sweep_equals_the_sweep(prepared, swept):
    # the module's 300-node sweep, its rows already trained (this test used to load and sweep Cora)
    rows, _ = swept
    entries = lower(GRID, SEEDS, model_config=MODEL, config=BASE)
    part = [e for e in entries if e.model.hidden == 8 and e.model.layers == 2][::-1]  # one group, in another order
    outcomes = run_entries(prepared.data, prepared.n_classes, part, execution=EXEC, log=None)
    assert len(outcomes) == 4 and [e.seed for e in part] == [1, 0, 1, 0]
    for e, o in zip(part, outcomes):
        (run,) = [run for run in find(rows, **grid_values(e)).runs if run["seed"] == e.seed]
        assert o.val_acc == pytest.approx(run["val_acc"], abs=1e-6)
        assert o.test_acc == pytest.approx(run["test_acc"], abs=1e-6)
        assert o.epochs_run == run["epochs_run"]
    # 3 classes, chance 1/3: every run learned something (measured 0.96, 0.97, 0.93 and 0.50, the slow lr 0.01)
    assert min(o.val_acc for o in outcomes) > 0.45 and max(o.val_acc for o in outcomes) > 0.9


# --- reports ----------------------------------------------------------------------------------------


def test_format_table_lists_rows_best_first_and_names_the_best(swept):
    rows, _ = swept
    lines = format_table(rows).splitlines()
    assert len(lines) == 2 + 8 + 1
    assert lines[0].split() == ["lr", "wd", "drop", "hid", "lay", "opt", "runs", "val", "acc", "test", "acc",
                                "epochs"]
    assert set(lines[1]) == {"-"}
    for line, r in zip(lines[2:10], rows):
        fields = line.split()
        assert float(fields[0]) == pytest.approx(r.config["lr"]) and int(fields[3]) == r.config["hidden"]
        assert int(fields[4]) == r.config["layers"] and fields[5] == "adam" and int(fields[6]) == 2
        assert fields[7:10] == [f"{r.val_mean:.4f}", "±", f"{r.val_std:.4f}"]
        assert fields[10:13] == [f"{r.test_mean:.4f}", "±", f"{r.test_std:.4f}"]
    best = rows[0]
    c = best.config
    assert lines[-1] == (f"best: lr={c['lr']:g}, weight_decay=0.0005, dropout=0.5, hidden={c['hidden']}, "
                         f"layers={c['layers']}, optimizer=adam (val {best.val_mean:.4f}, test {best.test_mean:.4f} "
                         f"± {best.test_std:.4f})")


def test_write_csv_one_row_per_configuration(swept, tmp_path):
    rows, _ = swept
    path = tmp_path / "sweep.csv"
    write_csv(rows, path)
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.csv"]  # no temp file left behind
    with open(path, newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == CSV_FIELDS and len(table) == 1 + 8
    for line, r in zip(table[1:], rows):
        record = dict(zip(CSV_FIELDS, line))
        assert float(record["lr"]) == r.config["lr"] and int(record["hidden"]) == r.config["hidden"]
        assert int(record["layers"]) == r.config["layers"] and int(record["n_runs"]) == 2
        # float32 results to 6 significant digits: no float64 noise such as 0.8130000233650208
        assert record["val_acc_mean"] == f"{r.val_mean:.6g}" and record["test_acc_std"] == f"{r.test_std:.6g}"
        assert float(record["val_acc_mean"]) == pytest.approx(r.val_mean, rel=1e-6)
        assert record["epochs_mean"] == (f"{r.epochs_mean:.0f}" if r.epochs_mean.is_integer() else f"{r.epochs_mean:g}")


def test_rows_to_json_keeps_every_run(swept):
    rows, _ = swept
    payload = json.loads(json.dumps(rows_to_json(rows)))  # plain JSON types only
    assert len(payload) == 8
    for item, r in zip(payload, rows):
        assert {k: item[k] for k in GRID_KEYS} == r.config
        assert item["n_runs"] == 2 and item["val_acc_mean"] == r.val_mean and item["test_acc_mean"] == r.test_mean
        assert item["runs"] == r.runs
        assert [run["seed"] for run in item["runs"]] == SEEDS
        assert set(item["runs"][0]) == {"seed", "split", "val_acc", "test_acc", "epochs_run"}


# --- the CLI ------------------------------------------------------------------------------------------


def test_cli_sweep_writes_csv_and_json_equal_to_run_grid(tmp_path, capsys, swept):
    rows, _ = swept
    csv_path, json_path = tmp_path / "s.csv", tmp_path / "s.json"
    argv = ["sweep", *CLI, "--lr", "0.01,0.05", "--hidden", "8,16", "--seeds", "2",
            "--csv", str(csv_path), "--json", str(json_path)]
    assert run_main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("best: lr=") and len(out) == 2 + 4 + 1  # --quiet: the table only
    with open(csv_path, newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == CSV_FIELDS and len(table) == 1 + 4
    report = json.loads(json_path.read_text())
    assert report["seeds"] == SEEDS and report["splits"] == 1 and report["n_nodes"] == 300
    assert len(report["configurations"]) == 4 and report["best"] == report["configurations"][0]
    assert report["grid"]["lr"] == [0.01, 0.05] and report["grid"]["hidden"] == [8, 16]
    assert report["fixed"]["epochs"] == 30 and "lr" not in report["fixed"]
    # The CLI ran the same runs as run_grid on the same data (the layers-2 half of the grid).
    for item in report["configurations"]:
        row = find(rows, lr=item["lr"], hidden=item["hidden"], layers=2)
        assert item["n_runs"] == 2 and item["layers"] == 2
        assert [run["test_acc"] for run in item["runs"]] == pytest.approx(
            [run["test_acc"] for run in row.runs], abs=1e-6)
        assert [run["epochs_run"] for run in item["runs"]] == [run["epochs_run"] for run in row.runs]
    best = report["best"]
    assert out[-1].startswith(f"best: lr={best['lr']:g}, weight_decay=0.0005, dropout=0.5, "
                              f"hidden={best['hidden']}, layers=2, optimizer=adam (val {best['val_acc_mean']:.4f}")
    assert best["val_acc_mean"] == max(item["val_acc_mean"] for item in report["configurations"])


@pytest.fixture(scope="module")
def seeds3(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "seeds3.json"
    assert run_main(["train", *CLI, "--seeds", "3", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def single_cli(tmp_path, seed):
    path = tmp_path / f"seed{seed}.json"
    assert run_main(["train", *CLI, "--seed", str(seed), "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_cli_train_seeds_runs_equal_single_runs(seeds3, single, tmp_path):
    assert seeds3["seeds"] == [0, 1, 2] and [r["seed"] for r in seeds3["runs"]] == [0, 1, 2]
    assert seeds3["test_acc"] == [r["test_acc"] for r in seeds3["runs"]]
    assert seeds3["test_acc_mean"] == pytest.approx(np.mean(seeds3["test_acc"]), abs=1e-12)
    for run in seeds3["runs"]:  # the library's single run on the same graph, with that seed's key
        one = single(MODEL, BASE, run["seed"])
        assert run["test_acc"] == pytest.approx(one.metrics["test_acc"], abs=1e-6)
        assert run["val_acc"] == pytest.approx(one.metrics["val_acc"], abs=1e-6)
        assert run["epochs_run"] == one.epochs_run and run["stopped_early"] == one.stopped_early
    assert len(set(seeds3["test_acc"])) > 1 or len({r["epochs_run"] for r in seeds3["runs"]}) > 1
    # Seed 0 (the base seed) also equals the CLI's own single run, which goes through fit().
    alone = single_cli(tmp_path, 0)
    assert alone["seeds"] == [0] and alone["test_acc"][0] == pytest.approx(seeds3["test_acc"][0], abs=1e-6)


def test_cli_seeds_run_is_reproduced_by_its_own_seed(seeds3, tmp_path):
    alone = single_cli(tmp_path, 1)
    assert alone["n_edges"] == seeds3["n_edges"]
    assert alone["test_acc"][0] == pytest.approx(seeds3["runs"][1]["test_acc"], abs=1e-6)


def test_cli_sweep_dropout_list_starting_at_zero(tmp_path, single):
    path = tmp_path / "d.json"
    assert run_main(["sweep", *CLI, "--dropout", "0,0.5", "--seeds", "1", "--json", str(path)]) == 0
    rows = {item["dropout"]: item["runs"][0] for item in json.loads(path.read_text())["configurations"]}
    want = single(MODEL, BASE, 0)  # dropout 0.5, seed 0
    assert rows[0.5]["val_acc"] == pytest.approx(want.metrics["val_acc"], abs=1e-6)
    assert rows[0.5]["test_acc"] == pytest.approx(want.metrics["test_acc"], abs=1e-6)


@pytest.mark.parametrize("flag, values, match", [
    ("--lr", "0.01,-0.05", r"--lr -0\.05: the learning rate must be positive"),
    ("--dropout", "0.5,1.0", r"--dropout 1: the probability to drop must be in \[0, 1\)"),
    ("--weight-decay", "5e-4,-1", r"--weight-decay -1: the L2 factor must be 0 or more"),
], ids=["lr", "dropout", "weight_decay"])
def test_cli_sweep_validates_every_list_value_not_only_the_first(flag, values, match, capsys):
    # Every value is checked before the data is loaded or anything is trained.
    assert run_main(["sweep", *CLI, flag, values]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1 and re.search(match, err[0]), err


@pytest.mark.parametrize("argv, match", [
    (["sweep", "--lr", "0.1,abc"], r"'0\.1,abc' is not a comma-separated list of numbers"),
    (["sweep", "--hidden", "8,x"], r"'8,x' is not a comma-separated list of integers"),
    (["sweep", "--lr", ","], r"give at least one value"),
    (["sweep", "--memory-budget", "0"], r"'0' must be positive"),
    (["sweep", "--memory-budget", "xyz"], r"'xyz' is not a size such as 4G or 512M"),
    (["train", "--seeds", "0"], r"--seeds: 0 is not a positive integer"),
], ids=["lr_not_number", "hidden_not_integer", "empty_list", "budget_zero", "budget_not_size", "seeds_zero"])
def test_bad_lists_and_sizes_exit_2_with_one_line(argv, match, capsys):
    assert run_main([*argv, "--no-compile-cache"]) == 2
    captured = capsys.readouterr()
    err = unwrap(captured.err).strip().splitlines()
    assert captured.out == "" and len(err) == 1, err
    assert err[0].startswith("jaxgcn: error:") and re.search(match, err[0]), err[0]


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_splits_without_random_split_exits_2_naming_the_fix(command, capsys):
    assert run_main([command, *DATA_ARGS, "--splits", "2", "--no-compile-cache", "--quiet"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1
    assert "--splits 2" in err[0] and "--split random" in err[0]


def test_memory_budget_infinity_exits_2(capsys):
    assert run_main(["sweep", "--memory-budget", "inf", "--no-compile-cache"]) == 2
    assert len(unwrap(capsys.readouterr().err).strip().splitlines()) == 1
