"""`--help` that helps: every default shown, sweep's comma lists said, the --dataset forms from one
list, and every flag the README and docs/ mention accepted by the command they show it with."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest
from cli_run import run_main, unwrap

from jaxgcn.cli import build_parser, main
from jaxgcn.cli.parser import KindParser
from jaxgcn.datasets import available, load_dataset
from jaxgcn.datasets.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[1]
FORMS = [form for form, _ in available()]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?![\w-])")
INVOCATION = re.compile(r"\bjaxgcn\s+([a-z]+)")


def commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


COMMANDS = commands()


def helps() -> dict[str, argparse.ArgumentParser]:
    """``jaxgcn COMMAND --help`` -> the parser whose help it prints: the command's, or for a command
    of kinds (plot), the kinds' overview and, as "plot curves", each kind's own."""
    found: dict[str, argparse.ArgumentParser] = {}
    for name, parser in COMMANDS.items():
        found[name] = parser
        if isinstance(parser, KindParser):
            found[name] = parser.help_parser(None)
            found.update({f"{name} {kind}": parser.help_parser(kind) for kind in parser.kinds})
    return found


HELPS = helps()


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def help_of(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main([*command.split(), "--help"]) == 0
    return capsys.readouterr().out


def entries(help_text: str) -> dict[str, str]:
    """Each option of a --help text -> its entry (invocation and help, whitespace collapsed)."""
    found: dict[str, str] = {}
    current: list[str] = []

    def close() -> None:
        if current:
            text = " ".join(" ".join(current).split())
            for flag in re.findall(r"^(?:-\w(?: \S+)?, )*(--[\w-]+)", text) + re.findall(r"^(-\w)\b", text):
                found[flag] = text
            current.clear()

    for line in help_text.splitlines():
        if re.match(r"^  -", line):  # an option's first line
            close()
            current.append(line)
        elif current and re.match(r"^   ", line):  # its help, indented further
            current.append(line)
        else:
            close()
    close()
    return found


def shown(default: object) -> str:
    return ",".join(map(str, default)) if isinstance(default, (tuple, list)) else str(default)


@pytest.mark.parametrize("command", sorted(HELPS))
def test_every_option_has_help_and_shows_its_default(command, capsys):
    text = entries(help_of(command, capsys))
    for action in HELPS[command]._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        flag = action.option_strings[-1]
        assert flag in text, f"{command} --help lists no {flag}"
        assert action.help, f"{command} {flag} has no help text"
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
            assert "(default: None)" not in text[flag] and "(default: False)" not in text[flag], text[flag]
            continue
        assert f"(default: {shown(action.default)})" in text[flag], f"{command}: {text[flag]}"
        assert text[flag].count("(default") == 1, f"{command}: two defaults in {text[flag]}"


def test_train_help_shows_the_paper_defaults(capsys):
    text = entries(help_of("train", capsys))
    for flag, default in {"--hidden": "16", "--layers": "2", "--lr": "0.01", "--epochs": "200",
                          "--weight-decay": "0.0005", "--early-stopping": "kipf", "--window": "10",
                          "--patience": "50", "--seed": "0", "--val-frac": "0.1", "--test-frac": "0.2",
                          "--nodes": "2000", "--classes": "5", "--avg-degree": "8.0", "--homophily": "0.8",
                          "--features": "64", "--log-every": "20"}.items():
        assert f"(default: {default})" in text[flag], text[flag]


def test_sweep_help_says_which_flags_take_comma_lists(capsys):
    raw = help_of("sweep", capsys)
    text = entries(raw)
    swept = ("--hidden", "--layers", "--dropout", "--lr", "--optimizer", "--weight-decay")
    for flag in swept:
        assert re.search(r"comma list, e\.g\. [\w.+-]+,[\w.+-]+", text[flag]), text[flag]
        parsed = getattr(build_parser().parse_args(["sweep", flag, re.search(r"e\.g\. (\S+)", text[flag])
                                                    .group(1)]), flag[2:].replace("-", "_"))
        assert isinstance(parsed, tuple) and len(parsed) >= 2, (flag, parsed)  # the example parses
    for flag in set(text) - set(swept):
        assert "comma list" not in text[flag], f"{flag} does not take a list: {text[flag]}"
    assert "(default: 16)" in text["--hidden"] and "(16,)" not in raw


def test_flags_sit_in_the_group_of_what_they_affect():
    groups = {action.option_strings[-1]: group.title
              for group in COMMANDS["train"]._action_groups for action in group._group_actions
              if action.option_strings}
    assert groups["--features"] == "data"
    assert groups["--train-per-class"] == groups["--split"] == groups["--val"] == "split"
    assert all(groups[f].startswith("synthetic") for f in ("--nodes", "--classes", "--avg-degree", "--homophily"))
    assert groups["--devices"] == groups["--shard-graph"] == groups["--distributed"]
    assert "output" not in groups["--devices"] and groups["--json"] == groups["--log-every"] == "output"


def test_dataset_forms_agree_in_help_datasets_and_the_error(capsys):
    assert FORMS[:3] == ["cora", "citeseer", "pubmed"] and FORMS.index("synthetic") == len(CATALOGUE)
    for form in ("ogb:DIR", "npz:DIR", "partitioned:DIR", "<name> --data-dir DIR"):
        assert form in FORMS
    for command, parser in HELPS.items():
        if "--dataset" in options(parser):
            dataset_help = entries(help_of(command, capsys))["--dataset"]
            assert all(form in dataset_help for form in FORMS), (command, dataset_help)
    capsys.readouterr()
    assert main(["datasets"]) == 0
    listed = [line.strip() for line in capsys.readouterr().out.splitlines()]
    starts = [form for form in FORMS if any(line.startswith(form + " ") for line in listed)]
    assert starts == FORMS, listed  # each form leads its own line, in the order of the one list
    assert main(["info", "--dataset", "nope"]) == 2
    err = unwrap(capsys.readouterr().err)
    assert err.startswith("jaxgcn: error: unknown dataset 'nope'; choose one of ") and err.count("\n") == 1
    assert all(form in err for form in FORMS), err


def test_partition_files_name_the_flags_that_read_them():
    with pytest.raises(ValueError, match=r"'partitioned:x'.*only `jaxgcn train --shard-graph` or `--distributed`"):
        load_dataset("partitioned:x")


# --- plot KIND: each kind's --help lists its own flags, and refuses another kind's ---------------------

COMMON = {"-h", "--help", "--out", "--title"}


def test_each_plot_kind_lists_its_own_flags_and_plot_lists_the_kinds(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse's width: a kind's line must fit a terminal
    curves, embeddings, sweep = (set(entries(help_of(f"plot {kind}", capsys))) for kind in ("curves", "embeddings",
                                                                                            "sweep"))
    assert curves == COMMON | {"--log", "--config-id"}
    assert sweep == COMMON | {"--sweep-json", "--x", "--y", "--fix"}
    assert embeddings >= COMMON | {"--checkpoint", "--run", "--method", "--dataset", "--edges", "--split", "--nodes"}
    assert not embeddings & (curves | sweep) - COMMON
    assert curves | embeddings | sweep == options(COMMANDS["plot"])  # every flag the parser takes, in a help
    overview = help_of("plot", capsys)
    assert set(entries(overview)) == COMMON
    kinds = re.search(r"\nkinds:\n(.*?)\n\n", overview, re.S).group(1).splitlines()
    assert [line.split()[0] for line in kinds] == ["curves", "embeddings", "sweep"], kinds  # one line each
    assert overview.rstrip().endswith("`jaxgcn plot KIND --help` lists the flags of a kind.")


@pytest.mark.parametrize(("argv", "flag", "taker"), [
    (["curves", "--log", "l.jsonl", "--out", "c.png", "--checkpoint", "model"], "--checkpoint", "embeddings"),
    (["--checkpoint=model", "curves", "--log", "l.jsonl", "--out", "c.png"], "--checkpoint", "embeddings"),
    (["sweep", "--sweep-json", "s.json", "--out", "s.png", "--dataset", "cora"], "--dataset", "embeddings"),
    (["embeddings", "--checkpoint", "model", "--out", "e.png", "--x", "lr"], "--x", "sweep"),
], ids=["after", "before-the-kind", "data-flag", "sweep-flag"])
def test_a_flag_of_another_plot_kind_is_a_usage_error_naming_the_kind_that_takes_it(capsys, argv, flag, taker):
    kind = next(word for word in argv if word in ("curves", "embeddings", "sweep"))
    assert main(["plot", *argv]) == 2
    assert unwrap(capsys.readouterr().err) == (f"jaxgcn: error: argument {flag}: `jaxgcn plot {kind}` takes no "
                                               f"{flag}; `jaxgcn plot {taker}` takes it (see 'jaxgcn plot {kind} "
                                               "--help')\n")


def test_a_plot_command_parses_and_runs_as_before(tmp_path, capsys):
    args = build_parser().parse_args(["plot", "curves", "--log", "l.jsonl", "--out", "c.png"])
    assert (args.kind, args.log, args.out, args.config_id, args.title) == ("curves", Path("l.jsonl"), Path("c.png"),
                                                                           None, None)
    assert (args.method, args.x, args.y, args.dataset, args.checkpoint) == ("pca", "lr", "hidden", None, None)
    assert main(["plot", "curves", "--out", str(tmp_path / "c.png")]) == 2  # checked when it runs, as before
    assert unwrap(capsys.readouterr().err) == "jaxgcn: error: jaxgcn plot curves needs --log\n"
    pytest.importorskip("matplotlib")
    log = tmp_path / "l.jsonl"
    log.write_text("".join(json.dumps({"run": 0, "epoch": e, "loss": 1 / e, "train_acc": 0.5, "val_loss": 1 / e,
                                       "val_acc": 0.4}) + "\n" for e in range(1, 6)))
    assert main(["plot", "curves", "--log", str(log), "--out", str(tmp_path / "c.png")]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'c.png'}\n"
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- every flag the README and docs/ show exists (read at run time: they are being restructured) ---

def doc_files() -> list[Path]:
    return [p for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] if p.is_file()]


def benchmark_flags() -> set[str]:
    """Flags of the scripts in benchmarks/, which the README documents beside the CLI."""
    return {flag for script in (ROOT / "benchmarks").glob("*.py")
            for flag in re.findall(r"add_argument\(\s*[\"'](--[\w-]+)", script.read_text())}


def code_blocks_and_prose(text: str) -> tuple[list[str], str]:
    blocks, prose, block, fenced = [], [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if fenced:
                blocks.append("\n".join(block))
                block = []
            fenced = not fenced
        elif fenced:
            block.append(line)
        else:
            prose.append(line)
    return blocks, "\n".join(prose)


def invocations(shell: str) -> list[tuple[str, str]]:
    """``(command, its arguments)`` of every ``jaxgcn <command>`` in shell text."""
    found = []
    shell = re.sub(r"\\\n", " ", shell)
    for line in shell.splitlines():
        line = re.sub(r"(^|\s)#.*", "", line)  # comments
        for part in re.split(r"&&|\|\||[|;&]", line):
            match = INVOCATION.search(part)
            if match and match.group(1) in COMMANDS:
                found.append((match.group(1), part[match.end():]))
    return found


def flag_problems(name: str, text: str) -> list[str]:
    """Flags of one markdown text that the command shown with them (or, in the text, any command)
    does not accept."""
    every = set().union(*map(options, COMMANDS.values())) | benchmark_flags() | options(build_parser())  # --version
    blocks, prose = code_blocks_and_prose(text)
    spans = re.findall(r"`([^`]+)`", prose, flags=re.S)
    problems = []
    for command, rest in [inv for shell in blocks + spans for inv in invocations(shell)]:
        kind = f"{command} {rest.split()[0]}" if rest.split() and f"{command} {rest.split()[0]}" in HELPS else None
        taken = options(HELPS[kind] if kind else COMMANDS[command])  # `jaxgcn plot curves`: the flags of curves
        problems += [f"{name}: `jaxgcn {kind or command} ... {flag}`: {kind or command} has no {flag}"
                     for flag in FLAG.findall(rest) if flag not in taken]
    for span in spans:
        if INVOCATION.search(span) or re.search(r"\.py\b|\bpython\b", span):
            continue  # a jaxgcn invocation (checked above) or another program's flags
        problems += [f"{name}: `{' '.join(span.split())}`: no command has {flag}"
                     for flag in FLAG.findall(span) if flag not in every]
    bare = re.sub(r"`[^`]+`", " ", prose, flags=re.S)
    problems += [f"{name}: {flag} (in the text): no command has it" for flag in FLAG.findall(bare)
                 if flag not in every]
    return problems


def test_doc_flag_scan_finds_what_it_should():
    blocks, prose = code_blocks_and_prose("a `--lr 1` b\n```bash\njaxgcn sweep --lr 1 \\\n  --save x\n```\n")
    assert blocks == ["jaxgcn sweep --lr 1 \\\n  --save x"] and "--lr" in prose
    assert [(c, FLAG.findall(rest)) for c, rest in invocations(blocks[0])] == [("sweep", ["--lr", "--save"])]
    shell = ("#SBATCH --time=1\nsrun --nodes=1 jaxgcn info --dataset x --hidden 8 # --nope\n"
             "jaxgcn plot x | jaxgcn evaluate --on val")
    assert [(c, FLAG.findall(rest)) for c, rest in invocations(shell)] == [
        ("info", ["--dataset", "--hidden"]), ("plot", []), ("evaluate", ["--on"])]
    doc = ("Use `--seeds N`, `jaxgcn sweep --memory-budget 4G`, `python benchmarks/b.py --anything` and --nope.\n"
           "```bash\njaxgcn train --seeds 3 \\\n    --memory-budget 4G\n```\n")
    assert flag_problems("doc.md", doc) == [
        "doc.md: `jaxgcn train ... --memory-budget`: train has no --memory-budget",
        "doc.md: --nope (in the text): no command has it"]
    plots = "```bash\njaxgcn plot curves --log l --checkpoint m\njaxgcn plot embeddings --checkpoint m --dataset x\n```"
    assert flag_problems("doc.md", plots) == ["doc.md: `jaxgcn plot curves ... --checkpoint`: plot curves has no "
                                              "--checkpoint"]


def test_every_flag_in_readme_and_docs_exists():
    paths = doc_files()
    assert paths, "no README.md or docs/*.md found"
    problems = [p for path in paths for p in flag_problems(str(path.relative_to(ROOT)), path.read_text())]
    assert not problems, "\n".join(problems)


# --- answers without JAX (issue 26): the parser imports no command module ----------------------------

NO_JAX = """
import sys
from jaxgcn.cli import main
code = main(sys.argv[1:])
print("imported:", " ".join(m for m in ("jax", "jaxlib", "scipy") if m in sys.modules) or "none", file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize(("argv", "code", "text"), [
    (["--help"], 0, "usage: jaxgcn"),
    (["--version"], 0, "jaxgcn "),
    (["train", "--help"], 0, "--weight-decay"),
    (["train", "--lr", "abc"], 2, "jaxgcn: error: argument --lr: invalid float value: 'abc'"),
    (["trian"], 2, "invalid choice: 'trian'"),
    (["sweep", "--hidden", "16,x"], 2, "--hidden"),
], ids=["help", "version", "train-help", "bad-value", "bad-command", "bad-list"])
def test_help_version_and_argument_errors_answer_without_importing_jax(argv, code, text):
    import subprocess
    import sys

    from jaxgcn.version import __version__

    proc = subprocess.run([sys.executable, "-c", NO_JAX, *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert text in proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1] == "imported: none"
    if argv == ["--version"]:
        assert proc.stdout == f"jaxgcn {__version__}\n"


# --- flags spelled in full, typos answered, choices in any case (issue 43) ---------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["train", "--hid", "32", "--epoch", "5"], "unrecognized argument --hid: flags are not abbreviated; did you mean "
                                               "--hidden? (see 'jaxgcn train --help')"),
    (["train", "--hidden", "32", "--epoch", "5"], "unrecognized argument --epoch: flags are not abbreviated; did you "
                                                  "mean --epochs? (see 'jaxgcn train --help')"),
    (["sweep", "--datas", "citeseer"], "unrecognized argument --datas: flags are not abbreviated; did you mean "
                                       "--dataset? (see 'jaxgcn sweep --help')"),
    (["train", "--hidenn", "3"], "unrecognized argument --hidenn; did you mean --hidden? (see 'jaxgcn train --help')"),
    (["info", "--wieght-decay=3"], "unrecognized argument --wieght-decay (see 'jaxgcn info --help')"),
    (["train", "--wieght-decay=3"], "unrecognized argument --wieght-decay; did you mean --weight-decay? (see 'jaxgcn "
                                    "train --help')"),
    (["train", "--on", "test"], "`jaxgcn train` takes no --on; `jaxgcn evaluate` takes it (see 'jaxgcn train --help')"),
    (["datasets", "--memory-budget", "4G"], "`jaxgcn datasets` takes no --memory-budget; `jaxgcn sweep` takes it (see "
                                            "'jaxgcn datasets --help')"),
], ids=["prefix", "second-prefix", "sweep-prefix", "typo", "nothing-close", "typo-with-value", "other-command",
        "datasets"])
def test_a_flag_a_command_does_not_take_is_refused_with_the_fix(capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert (captured.out, unwrap(captured.err)) == ("", f"jaxgcn: error: {message}\n")


def test_choices_are_case_insensitive_on_the_command_line_and_in_config_files(tmp_path):
    from jaxgcn.cli.records import parse_args

    args = parse_args(build_parser(), ["train", "--optimizer", "ADAM", "--feature-norm", "None", "--split", "Random",
                                       "--early-stopping", "PATIENCE", "--backend", "CSR"])
    assert (args.optimizer, args.feature_norm, args.split, args.early_stopping, args.backend) == \
        ("adam", "none", "random", "patience", "csr")
    assert parse_args(build_parser(), ["sweep", "--optimizer", "ADAM,Sgd"]).optimizer == ("adam", "sgd")
    assert parse_args(build_parser(), ["plot", "CURVES", "--log", "l", "--out", "o.png"]).kind == "curves"
    config = tmp_path / "c.toml"
    config.write_text('optimizer = "AdamW"\nnorm = "ROW"\n')
    args = parse_args(build_parser(), ["train", "--config", str(config)])
    assert (args.optimizer, args.norm) == ("adamw", "row")


@pytest.mark.parametrize(("command", "flag", "value", "why"), [
    ("predict", "--feature-norm", "none", "the model is applied with the normalizations it was trained with"),
    ("predict", "--norm", "row", "the model is applied with the normalizations it was trained with"),
    ("predict", "--reorder", "rcm", "the model is applied with the normalizations it was trained with"),
    ("predict", "--train-frac", "0.5", "it labels every node and uses no split; drop the flag"),
    ("predict", "--split", "random", "it labels every node and uses no split; drop the flag"),
    ("predict", "--split-file", "s.csv", "it labels every node and uses no split; drop the flag"),
    ("predict", "--val", "10", "it labels every node and uses no split; drop the flag"),
    ("predict", "--save-split", "s.csv", "it draws no split to save; `jaxgcn train --save-split FILE` writes"),
    ("evaluate", "--feature-norm", "none", "the model is applied with the normalizations it was trained with"),
    ("evaluate", "--save-split", "s.csv", "it draws no split to save; `jaxgcn train --save-split FILE` writes"),
])
def test_evaluate_and_predict_refuse_flags_that_cannot_apply(tmp_path, capsys, command, flag, value, why):
    out = ["--out", str(tmp_path / "p.csv")] if command == "predict" else []
    assert main([command, "--checkpoint", str(tmp_path / "m"), *out, flag, value]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and unwrap(captured.err).startswith(f"jaxgcn: error: `jaxgcn {command}` takes no {flag}: "
                                                                  f"{why}"), captured.err
    assert not (tmp_path / "p.csv").exists()


def test_predict_and_evaluate_help_list_only_the_flags_that_apply(capsys):
    listed = {}
    for command in ("predict", "evaluate", "train"):
        assert main([command, "--help"]) == 0
        listed[command] = set(re.findall(r"^  (--[a-z-]+)", capsys.readouterr().out, re.M))
    dropped = {"--feature-norm", "--norm", "--reorder"}
    split = {"--split", "--splits", "--train-per-class", "--val", "--test", "--train-frac", "--val-frac", "--test-frac",
             "--split-file"}
    assert dropped | split | {"--save-split"} <= listed["train"]
    assert not (dropped | split | {"--save-split"}) & listed["predict"]
    assert not (dropped | {"--save-split"}) & listed["evaluate"] and split <= listed["evaluate"]
    assert {"--checkpoint", "--dataset", "--edges", "--nodes", "--data-seed", "--out"} <= listed["predict"]


# Values that need no data (ranges, choices, dataset names, output folders) are refused before JAX is
# imported too (issue 43): the answer comes as fast as a mistyped flag's.
@pytest.mark.parametrize(("argv", "text"), [
    (["train", "--dataset", "corra"], "jaxgcn: error: unknown dataset 'corra' (did you mean cora?); choose one of "
                                      "cora, citeseer,"),
    (["train", "--dataset", "partitioned:{tmp}"], "dataset 'partitioned:{tmp}': partition files hold per-device row "
                                                  "blocks that only `jaxgcn train --shard-graph` or `--distributed`"),
    (["train", "--labels", "l.csv"], "--labels l.csv: needs --edges FILE (your own graph)"),
    (["info", "--features", "f.csv"], "--features f.csv: a features file needs --edges FILE"),
    (["train", "--dropout", "1.5"], "jaxgcn: error: --dropout 1.5: the probability to drop must be in [0, 1); "
                                    "give a value such as 0.5"),
    (["sweep", "--dropout", "0.5,1"], "--dropout 1: the probability to drop must be in [0, 1)"),
    (["train", "--lr", "0"], "--lr 0: the learning rate must be positive; give a value such as 0.01"),
    (["sweep", "--weight-decay", "5e-4,-1"], "--weight-decay -1: the L2 factor must be 0 or more"),
    (["train", "--clip-norm", "-2"], "--clip-norm -2: the clipping norm must be positive"),
    (["train", "--dataset", "synthetic", "--homophily", "1.2"], "--homophily 1.2: a probability must be in [0, 1]"),
    (["info", "--dataset", "synthetic", "--avg-degree", "-3"], "--avg-degree -3: a degree must be finite"),
    (["info", "--dataset", "Synthetic", "--nodes", "9", "--classes", "5"],
     "--nodes 9 --classes 5: a synthetic graph needs at least 2 nodes per class; give --nodes 10 or more"),
    (["train", "--train-frac", "1"], "--train-frac 1: a fraction must be in (0, 1)"),
    (["train", "--train-frac", "0.7", "--test-frac", "0.25"],
     "--train-frac 0.7 --val-frac 0.1 --test-frac 0.25: together 1.05, more than all the labelled nodes"),
    (["train", "--splits", "3"], "--splits 3 needs --split random"),
    (["train", "--json", "{tmp}/missing/r.json"], "--json {tmp}/missing/r.json: folder {tmp}/missing does not exist"),
    (["evaluate", "--checkpoint", "{tmp}", "--dataset", "pubmedd"], "unknown dataset 'pubmedd' (did you mean pubmed?)"),
    (["download", "corra"], "download corra: not a catalogue dataset"),
], ids=["dataset", "partitions", "labels-alone", "features-file-alone", "dropout", "sweep-dropout",
        "lr", "weight-decay", "clip-norm", "homophily", "avg-degree", "synthetic-nodes", "fraction", "fractions-sum",
        "splits", "json-folder", "evaluate-dataset", "download"])
def test_values_that_need_no_data_are_refused_before_jax_is_imported(tmp_path, argv, text):
    import subprocess
    import sys

    argv = [a.format(tmp=tmp_path) for a in argv]
    proc = subprocess.run([sys.executable, "-c", NO_JAX, *argv], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert text.format(tmp=tmp_path) in unwrap(proc.stderr), proc.stderr
    assert proc.stderr.splitlines()[-1] == "imported: none"


def test_datasets_prints_its_table_without_importing_jax(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", NO_JAX, "datasets"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "JAXGCN_DATA": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.strip()}
    assert rows["cora"][1:3] == ["2,708", "10,556"] and rows["pubmed"][7:9] == ["download", "8.7"]
    assert proc.stderr.splitlines()[-1] == "imported: none"


def test_one_edge_count_with_its_meaning_in_datasets_train_and_info(tmp_path, capsys):
    # issue 43: cora had 5,278 edges in train/info and 10,556 in `jaxgcn datasets`, neither saying what
    # it counts: the table counts the source's entries, train and info the cleaned graph's undirected
    # edges, each says so, and the table's note relates the two with figures this test checks
    from jaxgcn.cli.datasets import EDGE_ENTRIES
    from jaxgcn.datasets import prepare

    assert run_main(["datasets", "--data-root", tmp_path]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[2:4] == ["edge", "entries"] and f"\n{EDGE_ENTRIES}\n" in out
    undirected = prepare(load_dataset("cora")).info["n_edges"]
    assert f"cora's {CATALOGUE['cora'].edges:,} entries are {undirected:,} undirected edges" in EDGE_ENTRIES
    synthetic = ["--dataset", "synthetic", "--nodes", "60", "--classes", "2", "--features", "4", "--epochs", "1",
                 "--no-compile-cache"]
    assert run_main(["info", *synthetic[:8]]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert re.fullmatch(r"synthetic: 60 nodes, [\d,]+ undirected edges \(without self-loops\)", first), first
    assert run_main(["info", *synthetic[:8], "--no-symmetrize"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert re.fullmatch(r"synthetic: 60 nodes, [\d,]+ directed edges \(without self-loops\)", first), first
    assert run_main(["train", *synthetic, "--no-symmetrize"]) == 0
    assert re.match(r"synthetic: 60 nodes, [\d,]+ directed edges, 4 features", capsys.readouterr().out)


def test_python_dash_m_jaxgcn_is_the_command():
    import subprocess
    import sys

    from jaxgcn.version import __version__

    proc = subprocess.run([sys.executable, "-m", "jaxgcn", "--version"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, f"jaxgcn {__version__}\n")
    proc = subprocess.run([sys.executable, "-m", "jaxgcn", "train", "--epochs", "0"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "--epochs" in proc.stderr
