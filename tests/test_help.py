"""`--help` that helps: every default shown, sweep's comma lists said, the --dataset forms from one
list, and every flag the README and docs/ mention accepted by the command they show it with."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from cli_run import unwrap

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
    (["--check=model", "curves", "--log", "l.jsonl", "--out", "c.png"], "--checkpoint", "embeddings"),
    (["sweep", "--sweep-json", "s.json", "--out", "s.png", "--dataset", "cora"], "--dataset", "embeddings"),
    (["embeddings", "--checkpoint", "model", "--out", "e.png", "--x", "lr"], "--x", "sweep"),
], ids=["after", "abbreviated-before-the-kind", "data-flag", "sweep-flag"])
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


def test_python_dash_m_jaxgcn_is_the_command():
    import subprocess
    import sys

    from jaxgcn.version import __version__

    proc = subprocess.run([sys.executable, "-m", "jaxgcn", "--version"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, f"jaxgcn {__version__}\n")
    proc = subprocess.run([sys.executable, "-m", "jaxgcn", "train", "--epochs", "0"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "--epochs" in proc.stderr
