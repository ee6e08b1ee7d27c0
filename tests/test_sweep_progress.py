"""``jaxgcn sweep``'s progress per group (issue 58): before a group compiles, a line naming it and
what it trains; its epochs every --log-every; when it ends, its time and best configuration; and
nothing of these under --quiet. In-process, on a tiny synthetic graph, two groups."""

from __future__ import annotations

import contextlib
import io
import json
import re

import numpy as np
import pytest

from cli_run import run_main

# two groups (hidden 8 and 16), each 2 learning rates x 2 seeds = 4 runs
SWEEP = ["sweep", "--dataset", "synthetic", "--nodes", "60", "--classes", "3", "--train-per-class", "5",
         "--features", "8", "--epochs", "4", "--hidden", "8,16", "--lr", "0.01,0.05", "--seeds", "2",
         "--log-every", "2", "--no-compile-cache"]
DONE = re.compile(r"group (\d)/2 done in \d+\.\ds \| best val mean (\d\.\d{4}): lr ([\d.]+), weight_decay 0\.0005, "
                  r"dropout 0\.5 \(2 runs\)")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    report = tmp_path_factory.mktemp("sweep") / "sweep.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run_main([*SWEEP, "--json", report]) == 0
    return out.getvalue().splitlines(), json.loads(report.read_text())


def test_each_group_says_what_it_compiles_its_epochs_and_how_it_ended_in_order(swept):
    lines, _ = swept
    shown = [line for line in lines if line.startswith(("group ", "Epoch "))]
    expected = []
    for g, hidden in ((1, 8), (2, 16)):
        expected += [f"group {g}/2 (layers 2, adam, hidden {hidden}): training 4 runs",
                     f"group {g}/2: 2 configurations x 2 runs = 4 runs; compiling its program ...",
                     "Epoch   2 | runs training", "Epoch   4 | runs training",
                     f"group {g}/2 (layers 2, adam, hidden {hidden}): 4 runs in one program | compile ",
                     f"group {g}/2 done in "]
    assert len(shown) == len(expected), shown
    for line, start in zip(shown, expected):
        assert line.startswith(start), (line, start)
    assert lines.index(shown[0]) > lines.index("sweep: 4 configurations x 2 seeds x 1 split(s) = 8 runs")
    assert lines.index(shown[-1]) < next(i for i, line in enumerate(lines) if line.lstrip().startswith("lr "))


def test_a_group_ends_naming_its_best_configuration_and_score(swept):
    lines, report = swept
    done = [DONE.fullmatch(line) for line in lines if " done in " in line]
    assert all(done) and [m.group(1) for m in done] == ["1", "2"], lines
    for m, hidden in zip(done, (8, 16)):
        rows = [r for r in report["configurations"] if r["hidden"] == hidden]  # the group's 2 learning rates
        assert len(rows) == 2
        assert m.group(2) == f"{max(r['val_acc_mean'] for r in rows):.4f}"
        (best,) = [r for r in rows if r["lr"] == float(m.group(3))]
        assert f"{best['val_acc_mean']:.4f}" == m.group(2)  # the one named is the best (of equal ones, either)
        assert np.mean([run["val_acc"] for run in best["runs"]]) == pytest.approx(float(m.group(2)), abs=5e-5)


def test_quiet_prints_no_progress_line(capsys):
    assert run_main([*SWEEP, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"^(group |Epoch |sweep: )|compiling", out, re.M), out
    assert re.search(r"^best: ", out, re.M)  # the table is the command's output, printed still
