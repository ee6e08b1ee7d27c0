"""The measured figures of README.md and docs/ are written from one record, docs/figures.json, which
the benchmarks write (``--record``): a page that quotes a figure other than the record's, a key the
record lacks, or (in the README's prose) a figure outside a mark fails here, naming the page, the
line, the key and both texts (scripts/figures.py)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, str(ROOT / "benchmarks"))  # bench_scale imports its sibling figure_record, as when run
figures = _module(ROOT / "scripts" / "figures.py")
figure_record = _module(ROOT / "benchmarks" / "figure_record.py")
bench_scale = _module(ROOT / "benchmarks" / "bench_scale.py")
sys.path.remove(str(ROOT / "benchmarks"))

FIG = {"value": [1.0, 0.99], "unit": "ms", "digits": 2, "command": "python benchmarks/bench_train.py",
       "cpu": "a CPU", "date": "2026-12-06"}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "figures.py"), *args], capture_output=True,
                          text=True)


def copy_pages(tmp_path: Path) -> Path:
    """README.md, docs/*.md and the record in a folder of their own, to plant disagreements in."""
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    for page in (ROOT / "docs").glob("*.md"):
        shutil.copy(page, tmp_path / "docs" / page.name)
    shutil.copy(ROOT / "docs" / "figures.json", tmp_path / "docs" / "figures.json")
    return tmp_path


def test_the_pages_quote_the_recorded_figures():
    proc = run("--check")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_every_quoted_key_is_recorded_and_the_readme_quotes_the_speed_and_test_figures():
    record = figures.load_figures()
    quoted = {m["key"] for page in figures.pages(ROOT) for m in figures.MARK.finditer(page.read_text())}
    assert quoted <= set(record), sorted(quoted - set(record))
    readme = {m["key"] for m in figures.MARK.finditer((ROOT / "README.md").read_text())}
    assert {"train.cora.epoch_ms", "scale.1m.epoch_s", "scale.1m.pyg_csr_s", "sweep.cora.100.one_program_s",
            "tests.readme_command_s", "tests.suite_s"} <= readme
    for key, fig in record.items():  # each names where it came from
        assert fig["command"] and fig["cpu"] and fig["date"], key


def test_a_page_that_quotes_another_figure_fails_naming_file_line_key_and_both_texts(tmp_path):
    root = copy_pages(tmp_path)
    readme = root / "README.md"
    original = readme.read_text()
    match = next(m for m in figures.MARK.finditer(original) if m["key"] == "train.cora.epoch_ms")
    line = original.count("\n", 0, match.start()) + 1
    readme.write_text(original[:match.start("text")] + "0.97-1.00 ms" + original[match.end("text"):])

    proc = run("--check", "--root", str(root))
    assert proc.returncode == 1
    assert (f"README.md:{line}: train.cora.epoch_ms: the page shows '0.97-1.00 ms', docs/figures.json has "
            "'0.99-1.00 ms'") in proc.stderr
    assert "python benchmarks/bench_train.py --repeats 5" in proc.stderr  # how to measure it again

    proc = run("--root", str(root))  # writes the record's figure back
    assert proc.returncode == 0, proc.stderr
    assert readme.read_text() == original


def test_a_new_record_value_rewrites_every_page_that_quotes_it(tmp_path):
    root = copy_pages(tmp_path)
    path = root / "docs" / "figures.json"
    data = json.loads(path.read_text())
    data["figures"]["scale.1m.epoch_s"]["value"] = 3.14159
    path.write_text(json.dumps(data))
    proc = run("--check", "--root", str(root))
    assert proc.returncode == 1
    assert "README.md:" in proc.stderr and "docs/large-graphs.md:" in proc.stderr
    assert "scale.1m.epoch_s: the page shows '2.9 s', docs/figures.json has '3.1 s'" in proc.stderr

    assert run("--root", str(root)).returncode == 0
    assert "<!-- fig: scale.1m.epoch_s digits=1 -->3.1 s<!-- /fig -->" in (root / "README.md").read_text()
    assert "<!-- fig: scale.1m.epoch_s -->3.14 s<!-- /fig -->" in (root / "docs" / "large-graphs.md").read_text()
    assert run("--check", "--root", str(root)).returncode == 0


def test_a_key_the_record_lacks_and_a_broken_mark_fail():
    record = {"train.cora.epoch_ms": FIG}
    text = ("a <!-- fig: train.cora.epoch_msx -->0.99-1.00 ms<!-- /fig --> epoch\n"
            "a <!-- fig: train.cora.epoch_ms -->0.99-1.00 ms\n"
            "<!-- /fig --> split over two lines\n"
            "a <!-- fig: train.cora.epoch_ms digits=x -->1 ms<!-- /fig -->\n")
    found = figures.problems("docs/x.md", text, record)
    assert found[0].startswith("docs/x.md:1: train.cora.epoch_msx is not in docs/figures.json (the page shows "
                               "'0.99-1.00 ms')")
    assert any(p.startswith("docs/x.md:2: a fig mark that is not") for p in found)
    assert any(p.startswith("docs/x.md:3: a fig mark that is not") for p in found)
    assert "docs/x.md:4: train.cora.epoch_ms: unknown option 'digits=x' (digits=N or bare)" in found
    with pytest.raises(SystemExit, match="x.md:1: train.cora.epoch_msx is not in docs/figures.json"):
        figures.fill(text, record, "x.md")


@pytest.mark.parametrize(("planted", "figure"), [("takes 5.1 ms", "5.1 ms"), ("in 3 s,", "3 s"), ("(9.4×)", "9.4×"),
                                                ("in 3.7 GB", "3.7 GB"), ("a 20 GiB limit", "20 GiB"),
                                                ("81.7 ± 0.5", "81.7 ± 0.5"), ("0.99-1.00 ms", "0.99-1.00 ms"),
                                                ("1,250 s", "1,250 s")])
def test_an_unmarked_figure_in_the_readmes_speed_paragraph_fails(planted, figure):
    text = (ROOT / "README.md").read_text()
    anchor = "all\nmeasured in one session,"
    assert text.count(anchor) == 1, "the README's speed paragraph moved: update this test's anchor"
    line = text[:text.index(anchor)].count("\n") + 2
    planted = text.replace(anchor, f"all\nmeasured in one session, {planted} here,")
    assert figures.problems("README.md", planted, figures.load_figures()) == [
        f"README.md:{line}: {figure!r} is a figure outside a fig mark: record it (docs/figures.json) and mark it"]
    assert figures.problems("docs/x.md", planted, figures.load_figures()) == []  # other pages keep their history


def test_an_unmarked_figure_in_the_readmes_test_time_fails():
    text = (ROOT / "README.md").read_text()
    anchor = "with an empty `HOME`, that line took"
    assert text.count(anchor) == 1, "the README's test-time sentence moved: update this test's anchor"
    line = text[:text.index(anchor)].count("\n") + 1
    planted = text.replace(anchor, "with an empty `HOME` (the tests of 480 s), that line took")
    assert figures.problems("README.md", planted, figures.load_figures()) == [
        f"README.md:{line}: '480 s' is a figure outside a fig mark: record it (docs/figures.json) and mark it"]


def test_the_generated_testing_doc_takes_its_times_from_the_record(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # testing_doc imports figures, as when run
    testing_doc = _module(ROOT / "scripts" / "testing_doc.py")
    record = figures.load_figures()
    record["tests.suite_s"] = {**record["tests.suite_s"], "value": 999}
    monkeypatch.setattr(testing_doc, "load_figures", lambda root: record)
    assert "<!-- fig: tests.suite_s -->999 s<!-- /fig -->" in testing_doc.render()


def test_what_is_not_a_measured_figure_passes_unmarked():
    text = ("| cora | 1 × 10 | 10 × 2 |\n10 seeds, 2-core, 1M-node, Python 3.11-3.13, 0.5 and 1.3 MB\n"
            "prints `compiled in 0.81s`\n```bash\njaxgcn train  # 3 s\n```\n")
    assert figures.problems("README.md", text, {}) == []


def test_render_writes_ranges_std_units_and_the_marks_options():
    assert figures.render(FIG) == "0.99-1.00 ms"
    assert figures.render({**FIG, "value": [1.004, 0.996]}) == "1.00 ms"  # equal once rounded: one value
    assert figures.render(FIG, "digits=1") == "1.0 ms"
    assert figures.render({**FIG, "value": 9.3793, "unit": "×", "digits": 1}) == "9.4×"
    assert figures.render({**FIG, "value": 81.71, "std": 0.63, "unit": "%"}, "bare") == "81.71 ± 0.63"
    assert figures.render({**FIG, "value": 40, "unit": "s", "digits": 0}, "bare") == "40"
    with pytest.raises(ValueError, match="unknown option 'digit=1'"):
        figures.render(FIG, "digit=1")


def test_the_record_keeps_the_command_without_record_options_or_this_machines_paths():
    argv = ["/somewhere/benchmarks/bench_scale.py", "--sizes", "1000000", "--pyg-python", "venv/bin/python",
            "--record", "docs/figures.json", "--record-append", "--data-root=/data/x"]
    assert figure_record.command(argv) == ("python benchmarks/bench_scale.py --sizes 1000000 --pyg-python PATH "
                                           "--data-root=PATH")


def test_recording_replaces_appends_runs_of_a_session_and_says_when_the_cpu_changed():
    meta = {"command": "python benchmarks/bench_train.py", "cpu": "cpu A", "date": "2026-12-06"}
    record = figure_record.load(Path("/nonexistent/figures.json"))
    assert figure_record.update(record, {"k.ms": figure_record.figure(1.00123456, "ms", 2)}, meta) == []
    assert record["figures"]["k.ms"] == {"value": 1.0012, "unit": "ms", "digits": 2, **meta}
    figure_record.update(record, {"k.ms": figure_record.figure(0.99, "ms", 2)}, meta, append=True)
    assert record["figures"]["k.ms"]["value"] == [1.0012, 0.99]
    assert figures.render(record["figures"]["k.ms"]) == "0.99-1.00 ms"
    figure_record.update(record, {"k.ms": figure_record.figure(0.98, "ms", 2)}, meta)
    assert record["figures"]["k.ms"]["value"] == 0.98  # a new session replaces
    said = figure_record.update(record, {"k.ms": figure_record.figure(0.5, "ms", 2)}, {**meta, "cpu": "cpu B"},
                                append=True)
    assert record["figures"]["k.ms"]["value"] == 0.5  # another CPU's run is never a range with this one
    assert said == ["k.ms: recorded on 'cpu A' before, now on 'cpu B': the pages name the CPU beside their "
                    "figures; change those words too"]


def test_bench_scale_records_the_quoted_keys_and_drops_an_out_of_memory_claim_it_disproved():
    ours = {"epoch_s": 2.9, "peak_rss_gb": 3.69}
    oom = {"edge_index": {"error": "out of memory (limit 20 GiB)"}, "csr": {"epoch_s": 27.2}}
    found, drop = bench_scale.size_figures(1_000_000, ours, oom, 20.0)
    assert set(found) <= set(figures.load_figures())  # the keys the pages quote
    assert set(found) == {"scale.1m.epoch_s", "scale.1m.peak_rss_gb", "scale.1m.pyg_csr_s", "scale.1m.pyg_csr_ratio",
                          "scale.1m.pyg_edge_index_oom_gib"}
    assert found["scale.1m.pyg_csr_ratio"]["value"] == pytest.approx(27.2 / 2.9, abs=1e-4)
    assert "scale.1m.pyg_edge_index_s" in drop and "scale.1m.pyg_csr_oom_gib" in drop

    fits = {"edge_index": {"epoch_s": 40.0}, "csr": {"epoch_s": 27.2}}
    found, drop = bench_scale.size_figures(1_000_000, ours, fits, 20.0)
    assert "scale.1m.pyg_edge_index_oom_gib" in drop and "scale.1m.pyg_edge_index_oom_gib" not in found
    record = {"figures": dict(figures.load_figures())}
    said = figure_record.update(record, found, {"command": "c", "cpu": record["figures"]["scale.1m.epoch_s"]["cpu"],
                                                "date": "d"}, drop=drop)
    assert "scale.1m.pyg_edge_index_oom_gib" not in record["figures"]
    assert any(s.startswith("scale.1m.pyg_edge_index_oom_gib: removed from the record") for s in said)
