"""Catalogue downloads end to end, against a local HTTP server standing in for the internet.

The ``mirror`` fixture (module scope) runs the standard library's ``ThreadingHTTPServer`` with a
``SimpleHTTPRequestHandler`` rooted at a temporary folder, in a daemon thread on 127.0.0.1 and a
free port. The folder is laid out as a ``$JAXGCN_MIRROR`` (``<name>/<filename>``) and holds two
gnn-benchmark files the tests write (tests/tiny_datasets.py: the published layout, 180 nodes) under
tiny-shchur and tiny-shchur2, catalogue rows that ``server`` adds with their sizes and SHA-256 as
published rows carry them: so every guard here runs in every clone. Shchur et al.'s published
cora.npz / citeseer.npz are served under shchur-cora and shchur-citeseer when the shared dataset
folder is there (``$JAXGCN_TEST_DATA``, conftest.py); the one test of the published file itself
(``published``) skips, saying where to get it, when it is not. The handler logs nothing, records
every GET path in ``mirror.gets`` (cleared per test by ``server``) and, before answering, waits for
the event ``mirror.gate`` (set unless a test clears it to hold a download open while another client
starts). A mirror URL may carry a path
prefix (``<url>/bad``): tests that serve altered files put them under their own prefix and leave
the shared layout alone. Every test uses its own ``tmp_path`` data root and sets ``JAXGCN_MIRROR``
itself (conftest.py removes it).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from cli_run import run_main, unwrap
from conftest import SHARED_DATASETS, closed_port, local_server, shared_file
from tiny_datasets import GB_NODES, tiny_row, write_gnnbench, write_planetoid

import jaxgcn.datasets.gnnbench
from jaxgcn.datasets import load_dataset
from jaxgcn.datasets import catalogue, download, parsed
from jaxgcn.datasets.base import RawGraph
from jaxgcn.datasets.catalogue import CATALOGUE, Dataset, Source
from jaxgcn.datasets.download import DownloadError, is_cached

CORA_SHA = CATALOGUE["shchur-cora"].sources[0].sha256
TINY, TINY2 = "tiny-shchur", "tiny-shchur2"  # rows served from files the mirror writes (tiny_datasets)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(folder: Path) -> list[str]:
    """Temporary files (pooch's ``tmp*``, our ``.*.tmp<pid>``, ``.extract.tmp<pid>``) in ``folder``."""
    return [p.name for p in folder.iterdir() if "tmp" in p.name]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    root = tmp_path_factory.mktemp("mirror")
    tiny, tiny2 = write_gnnbench(root / TINY / "tiny.npz", seed=0), write_gnnbench(root / TINY2 / "tiny2.npz", seed=1)
    for name in ("cora", "citeseer"):  # the published files, where the shared folder has them
        if (SHARED_DATASETS / "gnn-benchmark" / f"{name}.npz").is_file():
            (root / f"shchur-{name}").mkdir()
            shutil.copy(SHARED_DATASETS / "gnn-benchmark" / f"{name}.npz", root / f"shchur-{name}" / f"{name}.npz")
    state = SimpleNamespace(root=root, gets=[], gate=threading.Event(), tiny=tiny, rows=(tiny_row(tiny, TINY),
                                                                                        tiny_row(tiny2, TINY2)))
    state.gate.set()

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            state.gets.append(self.path)
            state.gate.wait(120)
            super().do_GET()

    server = local_server(ThreadingHTTPServer, partial(Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def server(mirror, monkeypatch):
    """The mirror, set as $JAXGCN_MIRROR, with its request log cleared and its tiny rows in the catalogue."""
    mirror.gets.clear()
    mirror.gate.set()
    monkeypatch.setenv("JAXGCN_MIRROR", mirror.url)
    for row in mirror.rows:
        monkeypatch.setitem(CATALOGUE, row.name, row)
    yield mirror
    mirror.gate.set()


def add_row(monkeypatch, name: str, fmt: str, sources: tuple[Source, ...], stem: str) -> Dataset:
    entry = Dataset(name, fmt, sources, 0, 0, 0, 0, "ogb" if fmt.startswith("ogb") else "planetoid", "test",
                    "test", stem=stem)
    monkeypatch.setitem(CATALOGUE, name, entry)
    return entry


@pytest.fixture
def published(server):
    """The mirror, which then serves Shchur et al.'s published cora.npz (else the test skips)."""
    shared_file("gnn-benchmark", "cora.npz")
    return server


def test_the_published_shchur_cora_downloads_and_verifies(published, tmp_path):
    raw = load_dataset("shchur-cora", data_root=tmp_path, progress=False)
    assert raw.labels.size == raw.features.shape[0] == 2708 and raw.features.shape[1] == 1433
    assert sha256(tmp_path / "shchur-cora" / "cora.npz") == CORA_SHA
    assert (tmp_path / "shchur-cora" / "cora.npz.sha256").read_text() == f"{CORA_SHA} 540580\n"
    assert is_cached(CATALOGUE["shchur-cora"], tmp_path) and published.gets == ["/shchur-cora/cora.npz"]


def test_download_verify_cache_and_load_once(server, tmp_path, monkeypatch):
    raw = load_dataset(TINY, data_root=tmp_path, progress=False)
    assert raw.labels.size == raw.features.shape[0] == GB_NODES and raw.features.shape[1] == 12
    path = tmp_path / TINY / "tiny.npz"
    assert path.read_bytes() == server.tiny.read_bytes()
    published_sha = CATALOGUE[TINY].sources[0].sha256
    assert (tmp_path / TINY / "tiny.npz.sha256").read_text() == f"{published_sha} {server.tiny.stat().st_size}\n"
    assert is_cached(CATALOGUE[TINY], tmp_path)
    assert server.gets == [f"/{TINY}/tiny.npz"]
    assert not leftovers(path.parent)

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setattr(jaxgcn.datasets.gnnbench, "load_gnnbench", no_parse)
    again = load_dataset(TINY, data_root=tmp_path, progress=False)
    assert server.gets == [f"/{TINY}/tiny.npz"]  # no second request
    for field in ("senders", "receivers", "labels"):
        assert np.array_equal(getattr(raw, field), getattr(again, field)), field
    assert (raw.features != again.features).nnz == 0
    assert {k: v.tolist() for k, v in raw.splits.items()} == {k: v.tolist() for k, v in again.splits.items()}


def test_planetoid_row_records_first_hashes_and_refuses_a_changed_file(server, tmp_path, monkeypatch):
    served = write_planetoid(server.root / "planetoid" / "test-planetoid", "tiny")
    monkeypatch.setenv("JAXGCN_MIRROR", f"{server.url}/planetoid")
    entry = add_row(monkeypatch, "test-planetoid", "planetoid", catalogue._planetoid("tiny"), "tiny")
    assert all(s.sha256 is None for s in entry.sources)

    raw = load_dataset("test-planetoid", data_root=tmp_path, progress=False)
    assert raw.labels.size == 560 and raw.name == "test-planetoid"
    assert [raw.splits[k].size for k in ("train", "val", "test")] == [20, 500, 20]
    assert len(server.gets) == 8
    folder = tmp_path / "test-planetoid"
    for part in catalogue.PLANETOID_PARTS:
        name = f"ind.tiny.{part}"
        digest, size = (folder / f"{name}.sha256").read_text().split()
        assert digest == sha256(served / name) and int(size) == (served / name).stat().st_size

    (served / "ind.tiny.y").write_bytes(b"not the file that was first downloaded")
    (folder / "ind.tiny.y").unlink()
    assert not is_cached(entry, tmp_path)
    monkeypatch.setattr(download, "RETRIES", 1)  # a mismatch is retried once, then refused
    with pytest.raises(DownloadError, match=r"ind\.tiny\.y downloaded a file whose SHA-256 differs from the first "
                                            r"download's .*nothing was kept"):
        load_dataset("test-planetoid", data_root=tmp_path, progress=False)
    assert not (folder / "ind.tiny.y").exists() and (folder / "ind.tiny.y.sha256").is_file()
    assert not leftovers(folder)
    assert server.gets[8:] == ["/planetoid/test-planetoid/ind.tiny.y"] * 2


def test_a_corrupted_download_of_a_published_file_keeps_nothing(server, tmp_path, monkeypatch):
    (server.root / "bad" / "shchur-cora").mkdir(parents=True, exist_ok=True)
    (server.root / "bad" / "shchur-cora" / "cora.npz").write_bytes(b"\0" * 1000)
    monkeypatch.setenv("JAXGCN_MIRROR", f"{server.url}/bad")
    monkeypatch.setattr(download, "RETRIES", 0)
    url = f"{server.url}/bad/shchur-cora/cora.npz"
    with pytest.raises(DownloadError) as err:
        load_dataset("shchur-cora", data_root=tmp_path, progress=False)
    assert url in str(err.value) and "differs from the published's" in str(err.value)
    assert f"nothing was kept at {tmp_path / 'shchur-cora' / 'cora.npz'}" in str(err.value)
    folder = tmp_path / "shchur-cora"
    assert not (folder / "cora.npz").exists() and not (folder / "cora.npz.sha256").exists()
    assert not leftovers(folder) and server.gets == ["/bad/shchur-cora/cora.npz"]


def unhashed_row(monkeypatch, name: str) -> Dataset:
    """A gnn-benchmark row like cora-full's: no published SHA-256 (the first download's is recorded)."""
    return add_row(monkeypatch, name, "gnnbench", (Source("https://upstream.invalid/cora.npz", "cora.npz"),), "cora")


@pytest.mark.parametrize("first, message", [
    (b"<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n",
     r"answered with an HTML page, not the dataset file \(an error page, a login or captive portal, a proxy\?\); "
     r"nothing was kept"),
    (b"PK\x03\x04" + b"\0" * 500, r"the downloaded cora\.npz did not parse \(.*\); nothing was kept: run again to "
                                 r"download anew"),
])
def test_a_bad_first_download_is_never_recorded_and_the_next_one_succeeds(server, tmp_path, monkeypatch, first,
                                                                         message):
    # issue 25: the first bytes received were trusted and their hash recorded: a proxy's error page
    # or a truncated file became the dataset's identity and every later download was refused
    entry = unhashed_row(monkeypatch, "test-nohash")
    bad = server.root / "first" / "test-nohash"
    bad.mkdir(parents=True, exist_ok=True)
    (bad / "cora.npz").write_bytes(first)
    (server.root / "test-nohash").mkdir(exist_ok=True)
    shutil.copy(server.tiny, server.root / "test-nohash" / "cora.npz")
    monkeypatch.setenv("JAXGCN_MIRROR", f"{server.url}/first")
    monkeypatch.setattr(download, "RETRIES", 0)
    with pytest.raises(DownloadError, match=message):
        load_dataset("test-nohash", data_root=tmp_path, progress=False)
    folder = tmp_path / "test-nohash"
    assert sorted(p.name for p in folder.iterdir()) == [".lock"]  # no file, no record, no temp, no parse cache
    monkeypatch.setenv("JAXGCN_MIRROR", server.url)
    assert load_dataset("test-nohash", data_root=tmp_path, progress=False).labels.size == GB_NODES
    assert (folder / "cora.npz.sha256").read_text().split()[0] == sha256(server.tiny) and is_cached(entry, tmp_path)


@pytest.mark.parametrize("hashed", ["published", "recorded"])
def test_a_cached_file_cut_short_after_its_record_is_fetched_again_or_refused(server, tmp_path, monkeypatch, capsys,
                                                                            hashed):
    # the record (<file>.sha256: hash and size) was written when the file verified; a file cut short
    # since (a full disk, an interrupted copy of the cache) is not cached any more: offline it is
    # refused in one line, never parsed; online it is downloaded again and verified (against the
    # published hash, or the one recorded at the first download)
    if hashed == "published":
        name, filename, entry = TINY, "tiny.npz", CATALOGUE[TINY]
    else:
        name, filename, entry = "test-nohash", "cora.npz", unhashed_row(monkeypatch, "test-nohash")
        (server.root / name).mkdir(exist_ok=True)
        shutil.copy(server.tiny, server.root / name / filename)
    assert run_main(["download", name, "--data-root", tmp_path, "--quiet"]) == 0
    path, full = tmp_path / name / filename, server.tiny.read_bytes()
    record = (tmp_path / name / f"{filename}.sha256").read_text()
    path.write_bytes(full[: len(full) // 2])
    assert not is_cached(entry, tmp_path)
    capsys.readouterr()
    assert run_main(["datasets", "--data-root", tmp_path]) == 0
    assert status_of(capsys.readouterr().out, name).startswith("download")

    monkeypatch.setenv("JAXGCN_MIRROR", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setattr(download, "RETRIES", 0)
    assert run_main(["train", "--dataset", name, "--data-root", tmp_path, "--epochs", "1", "--quiet"]) == 2
    err = unwrap(capsys.readouterr().err)
    assert err.startswith(f"jaxgcn: error: dataset {name}: could not download") and err.count("\n") == 1, err

    monkeypatch.setenv("JAXGCN_MIRROR", server.url)
    assert run_main(["download", name, "--data-root", tmp_path, "--quiet"]) == 0
    assert f"{name}: downloaded and verified, {GB_NODES} nodes" in capsys.readouterr().out
    assert path.read_bytes() == full and is_cached(entry, tmp_path)
    assert (tmp_path / name / f"{filename}.sha256").read_text() == record
    assert server.gets == [f"/{name}/{filename}"] * 2 and not leftovers(path.parent)


def test_a_killed_download_leaves_no_partial_file_behind(server, tmp_path, monkeypatch):
    # pooch streams into tmpXXXXXXXX in the folder; a process killed mid-transfer left it forever
    unhashed_row(monkeypatch, "test-nohash")
    (server.root / "test-nohash").mkdir(exist_ok=True)
    shutil.copy(server.tiny, server.root / "test-nohash" / "cora.npz")
    folder = tmp_path / "test-nohash"
    folder.mkdir(parents=True)
    (folder / "tmpab12_xyz").write_bytes(b"half a download")
    (folder / "tmp-notes.txt").write_text("a file of the user's")  # not pooch's name: kept
    load_dataset("test-nohash", data_root=tmp_path, progress=False)
    assert not (folder / "tmpab12_xyz").exists() and (folder / "tmp-notes.txt").exists()


def test_an_archive_that_is_not_one_or_expands_too_far_is_refused(server, tmp_path, monkeypatch):
    (server.root / "test-notzip").mkdir(exist_ok=True)
    (server.root / "test-notzip" / "notzip.zip").write_bytes(b"\x1f\x8b" + b"\0" * 300)  # gzip, not zip
    ogb_row(monkeypatch, "test-notzip", "ogb", "notzip")
    with pytest.raises(DownloadError, match=r"notzip\.zip: not a zip archive \(unreadable\); nothing was kept"):
        load_dataset("test-notzip", data_root=tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "test-notzip").iterdir()) == [".lock"]
    (server.root / "test-bomb").mkdir(exist_ok=True)
    with zipfile.ZipFile(server.root / "test-bomb" / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("bomb/raw/edge.csv", b"\0" * (120 * 2**20))  # 120 MiB of zeros: ~120 KB packed
    ogb_row(monkeypatch, "test-bomb", "ogb", "bomb")
    with pytest.raises(DownloadError, match=r"bomb\.zip: its members expand to 0\.13 GB, \d+ times the archive's "
                                            r"0\.1 MB \(a zip bomb\?\); refusing the archive"):
        load_dataset("test-bomb", data_root=tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "test-bomb").iterdir()) == [".lock"]


def test_offline_error_says_what_to_fetch_and_where(server, tmp_path, monkeypatch, capsys):
    port = closed_port()
    monkeypatch.setenv("JAXGCN_MIRROR", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(download, "RETRIES", 0)
    lib = tmp_path / "lib"
    with pytest.raises(DownloadError) as err:
        load_dataset(TINY, data_root=lib, progress=False)
    message = str(err.value)
    assert f"could not download http://127.0.0.1:{port}/{TINY}/tiny.npz (ConnectionError" in message
    assert f"-> {lib / TINY / 'tiny.npz'}" in message and f"`jaxgcn download {TINY}`" in message
    assert not (lib / TINY / "tiny.npz").exists() and not leftovers(lib / TINY)
    # as the message says, a file put in place by hand is verified and used without the network
    shutil.copy(server.tiny, lib / TINY / "tiny.npz")
    assert load_dataset(TINY, data_root=lib, progress=False).labels.size == GB_NODES
    assert is_cached(CATALOGUE[TINY], lib)

    root = tmp_path / "cli"
    monkeypatch.chdir(tmp_path)
    code = run_main(["train", "--dataset", TINY, "--data-root", root, "--epochs", "1", "--quiet"])
    out, err_text = capsys.readouterr()
    assert code == 2
    err_text = unwrap(err_text)  # one message, printed as short lines
    assert err_text.startswith(f"jaxgcn: error: dataset {TINY}: could not download") and err_text.count("\n") == 1
    assert f"`jaxgcn download {TINY}`" in err_text
    # nothing under the data root but the (empty) dataset folder and its lock file
    written = {p.relative_to(root).as_posix() for p in root.rglob("*")}
    assert written <= {TINY, f"{TINY}/.lock"}, written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli", "lib"]  # no run folder written in the cwd either


# the catalogue row is the test's: each process adds it (as tiny_datasets.tiny_row), its SHA-256 in argv[2]
SCRIPT = ("import sys; from jaxgcn.datasets import load_dataset; from jaxgcn.datasets.catalogue import CATALOGUE, "
          f"Dataset, Source; CATALOGUE['{TINY2}'] = Dataset('{TINY2}', 'gnnbench', (Source('https://upstream.invalid/"
          "tiny2.npz', 'tiny2.npz', None, sys.argv[2]),), 180, 0, 12, 3, 'per-class-20-30', 'test', 'test', "
          f"stem='tiny2'); print('ready', flush=True); print(load_dataset('{TINY2}', data_root=sys.argv[1], "
          "progress=False).labels.size)")


def test_two_processes_download_once(server, tmp_path):
    """The first GET is held open until both processes are inside load_dataset (and 0.5 s more), so the
    second one certainly finds the download in progress: it must wait on the lock, not fetch too."""
    server.gate.clear()
    env = {**os.environ, "JAXGCN_MIRROR": server.url, "JAX_PLATFORMS": "cpu"}
    digest = CATALOGUE[TINY2].sources[0].sha256
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path), digest], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready", proc.communicate(timeout=60)[1]
        deadline = time.monotonic() + 60
        while not server.gets and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        server.gate.set()
    results = [p.communicate(timeout=180) for p in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err
        assert out.split() == [str(GB_NODES)]
    assert server.gets == [f"/{TINY2}/tiny2.npz"]
    folder = tmp_path / TINY2
    assert sha256(folder / "tiny2.npz") == digest and not leftovers(folder)


# ----------------------------------------------------------------------------- OGB zips, both layouts

def write_gz(path: Path, rows) -> None:
    import gzip

    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.writelines(",".join(str(v) for v in np.atleast_1d(row)) + "\n" for row in rows)


EDGES = np.array([[0, 1], [1, 2], [2, 0], [3, 4], [4, 5], [5, 3], [0, 5]])
FEAT = np.round(np.linspace(-1, 1, 18).reshape(6, 3), 3).astype(np.float32)
LABELS = np.array([[0.0], [2.0], [np.nan], [1.0], [0.0], [2.0]])


def ogb_zip(dest: Path, stem: str, layout: str) -> None:
    """``dest/<stem>.zip`` holding ``<stem>/raw/...`` and ``<stem>/split/time/...`` (as tests/test_formats.py)."""
    src = dest.parent / f"build-{stem}" / stem
    raw = src / "raw"
    raw.mkdir(parents=True)
    if layout == "csv":
        write_gz(raw / "edge.csv.gz", EDGES)
        write_gz(raw / "node-feat.csv.gz", FEAT)
        write_gz(raw / "node-label.csv.gz", LABELS)
        write_gz(raw / "num-node-list.csv.gz", np.array([6]))
    else:
        np.savez(raw / "data.npz", edge_index=EDGES.T, node_feat=FEAT, num_nodes_list=np.array([6]),
                 num_edges_list=np.array([len(EDGES)]))
        np.savez(raw / "node-label.npz", node_label=LABELS)
    for name, ids in (("train", [0, 1]), ("valid", [3]), ("test", [4, 5])):
        write_gz(src / "split" / "time" / f"{name}.csv.gz", np.array(ids))
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest / f"{stem}.zip", "w") as z:
        for path in sorted(src.rglob("*")):
            z.write(path, path.relative_to(src.parent).as_posix())


def ogb_row(monkeypatch, name: str, fmt: str, stem: str) -> Dataset:
    return add_row(monkeypatch, name, fmt, (Source(f"https://upstream.invalid/{stem}.zip", f"{stem}.zip",
                                                   unzip=True),), stem)


def test_ogb_zips_in_both_layouts_are_fetched_extracted_once_and_agree(server, tmp_path, monkeypatch):
    ogb_zip(server.root / "test-ogb", "tiny", "csv")
    ogb_zip(server.root / "test-ogb-bin", "tiny-bin", "binary")
    entries = [ogb_row(monkeypatch, "test-ogb", "ogb", "tiny"), ogb_row(monkeypatch, "test-ogb-bin", "ogb-bin",
                                                                         "tiny-bin")]
    a = load_dataset("test-ogb", data_root=tmp_path, progress=False)
    b = load_dataset("test-ogb-bin", data_root=tmp_path, progress=False)
    assert sorted(server.gets) == ["/test-ogb-bin/tiny-bin.zip", "/test-ogb/tiny.zip"]
    assert b.senders.tolist() == [0, 1, 2, 3, 4, 5, 0] and b.labels.tolist() == [0, 2, -1, 1, 0, 2]
    for field in ("senders", "receivers", "features", "labels"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    for raw in (a, b):
        assert {k: v.tolist() for k, v in raw.splits.items()} == {"train": [0, 1], "val": [3], "test": [4, 5]}
    for entry in entries:
        folder = tmp_path / entry.name
        assert (folder / f"{entry.stem}.zip.extracted").is_file() and (folder / entry.stem / "raw").is_dir()
        assert is_cached(entry, tmp_path) and not leftovers(folder)
    # a second fetch neither downloads nor opens the zip again
    def no_unzip(*args, **kwargs):
        raise AssertionError("extracted again")

    monkeypatch.setattr(download, "zipfile", SimpleNamespace(ZipFile=no_unzip))
    for entry in entries:
        download.fetch(entry, tmp_path, progress=False)
    assert len(server.gets) == 2
    # accept a changed upstream archive as the hash-mismatch error says (delete the record): it is
    # downloaded and unpacked again
    monkeypatch.setattr(download, "zipfile", zipfile)
    shutil.rmtree(server.root / "build-tiny")
    global LABELS
    LABELS, old_labels = np.array([[1.0], [1.0], [np.nan], [1.0], [0.0], [2.0]]), LABELS
    try:
        ogb_zip(server.root / "test-ogb", "tiny", "csv")
    finally:
        LABELS = old_labels
    folder = tmp_path / "test-ogb"
    (folder / "tiny.zip").unlink()
    (folder / "tiny.zip.sha256").unlink()
    c = load_dataset("test-ogb", data_root=tmp_path, progress=False)
    assert c.labels.tolist() == [1, 1, -1, 1, 0, 2]  # the new archive was unpacked, not the old copy used


def test_a_zip_member_outside_the_folder_is_refused(server, tmp_path, monkeypatch):
    (server.root / "test-evil").mkdir(exist_ok=True)
    with zipfile.ZipFile(server.root / "test-evil" / "evil.zip", "w") as z:
        z.writestr("evil/raw/edge.csv.gz", b"")
        z.writestr("../evil", b"escaped")
    ogb_row(monkeypatch, "test-evil", "ogb", "evil")
    with pytest.raises(DownloadError, match=r"evil\.zip: member '\.\./evil' would be written outside .*refusing"):
        load_dataset("test-evil", data_root=tmp_path, progress=False)
    assert not (tmp_path / "evil").exists() and not (tmp_path / "test-evil" / "evil").exists()
    assert not (tmp_path / "test-evil" / "evil.zip.extracted").exists()


def proteins_zip(dest: Path) -> np.ndarray:
    """``dest/proteins.zip`` in ogbn-proteins' layout: ``proteins/raw/`` edges listed once with 8 edge
    features, 112 label columns of 0/1, ``node_species.csv.gz`` and the node and edge counts, and
    ``proteins/split/species/``; returns the edge features."""
    src = dest.parent / "build-proteins" / "proteins"
    raw = src / "raw"
    raw.mkdir(parents=True)
    edge_feat = np.round(np.arange(len(EDGES) * 8).reshape(len(EDGES), 8) / 100, 3)
    labels = np.zeros((6, 112))
    labels[[0, 3, 4], :] = 1.0
    write_gz(raw / "edge.csv.gz", EDGES)
    write_gz(raw / "edge-feat.csv.gz", edge_feat)
    write_gz(raw / "node-label.csv.gz", labels.astype(int))
    write_gz(raw / "node_species.csv.gz", np.array([3702, 3702, 4932, 4932, 9606, 9606]))
    write_gz(raw / "num-node-list.csv.gz", np.array([6]))
    write_gz(raw / "num-edge-list.csv.gz", np.array([len(EDGES)]))
    for name, ids in (("train", [0, 1, 2]), ("valid", [3]), ("test", [4, 5])):
        write_gz(src / "split" / "species" / f"{name}.csv.gz", np.array(ids))
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest / "proteins.zip", "w") as z:
        for path in sorted(src.rglob("*")):
            z.write(path, path.relative_to(src.parent).as_posix())
    return edge_feat


def test_ogbn_proteins_is_fetched_by_name_with_its_edge_features_averaged_to_its_nodes(server, tmp_path, capsys):
    edge_feat = proteins_zip(server.root / "ogbn-proteins")
    raw = load_dataset("ogbn-proteins", data_root=tmp_path, progress=False)
    assert server.gets == ["/ogbn-proteins/proteins.zip"]
    assert raw.labels.shape == (6, 112) and raw.labels.dtype == np.float32 and raw.labels[:, 0].tolist() == [
        1, 0, 0, 1, 1, 0]
    # node 0 is an end of edges 0 (0-1), 2 (2-0) and 6 (0-5): the mean of their 8 features (OGB's GCN example)
    assert raw.features.shape == (6, 8)
    np.testing.assert_allclose(raw.features[0], edge_feat[[0, 2, 6]].mean(axis=0), rtol=1e-6)
    assert {k: v.tolist() for k, v in raw.splits.items()} == {"train": [0, 1, 2], "val": [3], "test": [4, 5]}
    assert run_main(["train", "--dataset", "ogbn-proteins", "--data-root", tmp_path, "--epochs", "3",
                     "--no-compile-cache"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ogbn-proteins: 6 nodes") and ", 8 features, 112 labels | " in out[0]
    assert [line for line in out if line.startswith("test ")][0].startswith("test ROC-AUC ")


# ----------------------------------------------------------------------------- parse once, own files

def tiny_raw() -> RawGraph:
    return RawGraph("tiny", np.array([0, 1]), np.array([1, 2]), np.eye(3, dtype=np.float32),
                    np.array([0, 1, 0], np.int32), {"train": np.array([0]), "val": np.array([1]),
                                                    "test": np.array([2])})


def one_source(tmp_path, monkeypatch):
    """A small source file (cached despite its size), its cache path, and a parse that counts its calls."""
    monkeypatch.setattr(parsed, "MIN_BYTES", 0)
    source = tmp_path / "edges.csv"
    source.write_text("0,1\n1,2\n")
    calls = []

    def parse():
        calls.append(1)
        return tiny_raw()
    return source, parsed.cache_file(tmp_path / "root", "files", [source]), calls, parse


def test_cached_parses_once_until_the_source_or_the_loader_changes(tmp_path, monkeypatch):
    source, path, calls, parse = one_source(tmp_path, monkeypatch)
    first = parsed.cached(path, [source], parse)
    again = parsed.cached(path, [source], parse)
    assert len(calls) == 1 and path.is_file()
    assert again.senders.tolist() == first.senders.tolist() and again.labels.tolist() == [0, 1, 0]
    assert np.array_equal(again.features, first.features) and again.splits["test"].tolist() == [2]
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    parsed.cached(path, [source], parse)
    assert len(calls) == 2
    parsed.cached(path, [source], parse)
    assert len(calls) == 2
    monkeypatch.setattr(parsed, "LOADER_VERSION", parsed.LOADER_VERSION + 1)
    parsed.cached(path, [source], parse)
    assert len(calls) == 3
    # a cache folder that cannot be written: the parse result is returned, nothing stored
    if os.geteuid() == 0:  # root writes into read-only folders: block the folder with a file instead
        (tmp_path / "ro").write_text("")
        unwritable = tmp_path / "ro" / "x.npz"
    else:
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o555)
        unwritable = tmp_path / "ro" / "x.npz"
    raw = parsed.cached(unwritable, [source], parse)
    assert len(calls) == 4 and raw.labels.tolist() == [0, 1, 0] and not unwritable.exists()


def _rewrite_npz(path: Path, edit) -> None:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


@pytest.mark.parametrize("damage, why", [
    (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), r"unreadable: BadZipFile"),
    (lambda p: p.write_bytes(b""), r"unreadable: \w+"),
    (lambda p: _rewrite_npz(p, lambda a: a.update(labels=np.roll(a["labels"], 1))),
     r"its arrays differ from the SHA-256 recorded when it was written \(damaged or edited\)"),
])
def test_a_damaged_parse_cache_is_discarded_with_a_note_and_parsed_again(tmp_path, monkeypatch, damage, why):
    # issue 25: a truncated or empty cache file was a BadZipFile traceback; permuted labels with valid
    # keys trained silently on poisoned data
    source, path, calls, parse = one_source(tmp_path, monkeypatch)
    parsed.cached(path, [source], parse)
    damage(path)
    with pytest.warns(parsed.CacheNote, match=rf"{re.escape(str(path))}: discarded this parse cache \({why}\); the "
                                              "sources are parsed again"):
        again = parsed.cached(path, [source], parse)
    assert len(calls) == 2 and again.labels.tolist() == [0, 1, 0]
    assert parsed.load_raw_npz(path, verify=True).labels.tolist() == [0, 1, 0]  # rebuilt


def test_a_source_edited_to_the_same_size_and_mtime_is_parsed_again(tmp_path, monkeypatch):
    source, path, calls, parse = one_source(tmp_path, monkeypatch)
    parsed.cached(path, [source], parse)
    st = source.stat()
    source.write_text("0,2\n1,2\n")  # same size
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old modification time
    parsed.cached(path, [source], parse)
    assert len(calls) == 2
    # a large source is fingerprinted by 16 blocks spread over it, the first and the last among them
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(parsed.FULL_HASH_BYTES + 5 * parsed.SAMPLE_BYTES))
    seen = {parsed.content_fingerprint(big, big.stat().st_size)}
    for offset in (0, big.stat().st_size - 1):
        with open(big, "r+b") as f:
            f.seek(offset)
            f.write(b"x")
        seen.add(parsed.content_fingerprint(big, big.stat().st_size))
    assert len(seen) == 3


def own_files(tmp_path: Path, n: int, label) -> tuple[Path, Path]:
    """edges.csv (node i linked to i + 1 and i + 7, around a ring of ``n``) and labels.csv (``label(i)``)."""
    edges, labels = tmp_path / "edges.csv", tmp_path / "labels.csv"
    edges.write_text("src,dst\n" + "".join(f"n{i},n{(i + 1) % n}\nn{i},n{(i + 7) % n}\n" for i in range(n)))
    labels.write_text("node,label\n" + "".join(f"n{i},{label(i)}\n" for i in range(n)))
    return edges, labels


def test_cli_poisoned_cache_is_refused_and_the_run_equals_a_fresh_parse(tmp_path, monkeypatch, capsys):
    # the cached labels permuted, keys and layout intact: the run says so in one line, parses again,
    # and scores what a run from a fresh parse scores
    import json

    monkeypatch.setattr(parsed, "MIN_BYTES", 0)
    edges, labels = own_files(tmp_path, 60, lambda i: i // 20)
    argv = ["train", "--edges", edges, "--labels", labels, "--data-root", tmp_path / "root", "--train-per-class", "5",
            "--val", "10", "--test", "20", "--epochs", "20", "--quiet"]
    assert run_main([*argv, "--json", tmp_path / "fresh.json"]) == 0
    [cache] = (tmp_path / "root" / "parsed").glob("files-*.npz")
    _rewrite_npz(cache, lambda a: a.update(labels=np.roll(a["labels"], 20)))
    capsys.readouterr()
    assert run_main([*argv, "--json", tmp_path / "again.json"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxgcn: note: ") and "its arrays differ from the SHA-256" in err[0]
    fresh, again = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("fresh", "again"))
    assert again["test_acc"] == fresh["test_acc"] and again["val_acc"] == fresh["val_acc"]


def test_cli_own_files_are_parsed_once(tmp_path, monkeypatch, capsys):
    import jaxgcn.app.data

    monkeypatch.setattr(parsed, "MIN_BYTES", 0)
    edges, labels = own_files(tmp_path, 30, lambda i: i % 3)
    argv = ["info", "--edges", edges, "--labels", labels, "--data-root", tmp_path / "root", "--train-per-class", "2",
            "--val", "3", "--test", "6"]
    real, calls = jaxgcn.app.data.load_files, []
    monkeypatch.setattr(jaxgcn.app.data, "load_files", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert run_main(argv) == 0
    first = capsys.readouterr().out
    assert len(calls) == 1 and list((tmp_path / "root" / "parsed").glob("files-*.npz"))

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setattr(jaxgcn.app.data, "load_files", no_parse)
    assert run_main(argv) == 0
    assert capsys.readouterr().out == first and "30" in first


# ----------------------------------------------------------------------------- jaxgcn download / datasets

def status_of(listing: str, name: str) -> str:
    """The status column of ``name``'s row in `jaxgcn datasets`' table (located by the header)."""
    header, *rows = listing.splitlines()
    start, end = header.index("status"), header.index("licence")
    return next(row for row in rows if row.split()[:1] == [name])[start:end].strip()


def test_cli_download_then_list(server, tmp_path, capsys):
    assert run_main(["download", TINY, "--data-root", tmp_path, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert (f"{TINY}: downloaded and verified, 180 nodes ready in {tmp_path / TINY}") in out
    assert run_main(["download", TINY, "--data-root", tmp_path, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"{TINY}: already cached, 180 nodes ready in {tmp_path / TINY}"
    assert server.gets == [f"/{TINY}/tiny.npz"]

    assert run_main(["datasets", "--data-root", tmp_path]) == 0
    listing = capsys.readouterr().out
    assert status_of(listing, TINY).startswith("cached") and status_of(listing, TINY2).startswith("download")
    assert status_of(listing, "cora").startswith("bundled")
    assert status_of(listing, "pubmed") == "download 8.7 MB"  # the eight raw files' published sizes
    assert status_of(listing, "shchur-citeseer") == "download 1.3 MB"
    assert status_of(listing, "coauthor-cs") == "download 12.8 MB"
    # OGB publishes rounded sizes only: shown as such, in GB for the big ones
    assert status_of(listing, "ogbn-arxiv") == "download ~83 MB"
    assert status_of(listing, "ogbn-papers100M") == "download ~60.3 GB"
    assert status_of(listing, "cora-full") == "download ? MB"  # no published size
    assert f"cache: {tmp_path} " in listing

    assert run_main(["download", "nosuch", "--data-root", tmp_path]) == 2
    err = unwrap(capsys.readouterr().err)
    assert err.startswith("jaxgcn: error: download nosuch: not a catalogue dataset; choose from cora, citeseer, "
                          "pubmed, shchur-cora,") and "ogbn-arxiv" in err


def test_an_approximate_published_size_is_shown_as_such_and_never_refuses_a_download(server, tmp_path, monkeypatch,
                                                                                     capsys):
    # OGB's rows carry a size rounded from what OGB's downloader printed: a file of another size is
    # still downloaded (its SHA-256, recorded or published, is what verifies it)
    (server.root / "test-approx").mkdir(exist_ok=True)
    shutil.copy(server.tiny, server.root / "test-approx" / "cora.npz")
    entry = add_row(monkeypatch, "test-approx", "gnnbench",
                    (Source("https://upstream.invalid/cora.npz", "cora.npz", 2 * 10**9, approx=True),), "cora")
    assert entry.download_bytes == 2 * 10**9 and entry.download_approx
    assert run_main(["download", "test-approx", "--data-root", tmp_path, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"test-approx: downloading ~2.0 GB into {tmp_path / 'test-approx'}" in out
    assert "test-approx: downloaded and verified, 180 nodes" in out
    assert is_cached(entry, tmp_path) and server.gets == ["/test-approx/cora.npz"]


def test_four_lines_of_python_reproduce_a_protocol_batch_of_the_command_line(server, tmp_path, monkeypatch):
    # `jaxgcn train --dataset tiny-shchur --splits 3 --seeds 2` and load_protocol + fit_runs (the lines of
    # load_protocol's docstring, with amazon-photo's row served here by tiny-shchur's): the same runs.
    import json

    from jaxgcn import datasets, entries_for, fit_runs
    from jaxgcn.train import TrainConfig

    monkeypatch.setenv("JAXGCN_DATA", str(tmp_path))
    out = tmp_path / "cli.json"
    assert run_main(["train", "--dataset", TINY, "--splits", "3", "--seeds", "2", "--epochs", "30",
                     "--quiet", "--json", out]) == 0
    cli = json.loads(out.read_text())
    p = datasets.load_protocol(TINY, splits=3)
    res = fit_runs(p.data, p.n_classes, entries_for([0, 1], config=TrainConfig(epochs=30), splits=3))
    assert p.info["split"] == cli["split"] == "20/30 per class, rest test (seed 0..2)"
    assert p.info["protocol"] == "per-class-20-30" and p.info["split_sizes"]["train"] == 60  # 3 classes
    assert res.metrics["test_acc"].tolist() == cli["test_acc"] and len(cli["test_acc"]) == 6
    assert len(set(cli["test_acc"])) > 1  # three splits, two seeds: not one run six times
    with pytest.raises(ValueError, match=r"splits=2: dataset cora ships one split \(planetoid protocol\)"):
        datasets.load_protocol("cora", splits=2)
