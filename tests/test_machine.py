"""What this process may use on any machine (jaxgcn.host.memory): psutil's available memory and the
CPU affinity mask, capped by a container's cgroup limits, read from fake cgroup trees."""

from __future__ import annotations

import builtins
import os
import types
from pathlib import Path

import pytest

from jaxgcn.host import memory

GiB = 2**30


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return root


@pytest.fixture
def psutil_says(monkeypatch):
    import psutil

    def set_available(available: int) -> None:
        monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(available=available))
    return set_available


def test_memory_without_cgroup_is_psutils_figure(tmp_path, psutil_says):
    psutil_says(5 * GiB)
    assert memory.available_bytes(root=tmp_path) == 5 * GiB


def test_cgroup_v2_memory_limit_minus_usage_wins_when_smaller(tmp_path, psutil_says):
    psutil_says(5 * GiB)
    root = _tree(tmp_path, {"memory.max": str(3 * GiB), "memory.current": str(1 * GiB)})
    assert memory.available_bytes(root=root) == 2 * GiB


def test_cgroup_v2_reclaimable_page_cache_is_not_counted_as_used(tmp_path, psutil_says):
    psutil_says(5 * GiB)
    root = _tree(tmp_path, {"memory.max": str(3 * GiB), "memory.current": str(1 * GiB),
                            "memory.stat": f"anon 1000\ninactive_file {GiB // 2}\nactive_file 7"})
    assert memory.available_bytes(root=root) == 2 * GiB + GiB // 2


def test_cgroup_limit_above_psutils_figure_leaves_psutils(tmp_path, psutil_says):
    psutil_says(5 * GiB)
    root = _tree(tmp_path, {"memory.max": str(64 * GiB), "memory.current": str(1 * GiB)})
    assert memory.available_bytes(root=root) == 5 * GiB


def test_an_address_space_limit_caps_what_is_available(tmp_path, psutil_says, monkeypatch):
    # issue 25: `ulimit -v` was ignored: --hidden 1000000 passed the check and aborted with std::bad_alloc
    import resource

    import psutil

    psutil_says(5 * GiB)
    used = psutil.Process().memory_info().vms
    monkeypatch.setattr(resource, "getrlimit", lambda which: (used + GiB, resource.RLIM_INFINITY)
                        if which == resource.RLIMIT_AS else (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    free = memory.address_space_free()
    assert 0.9 * GiB < free <= GiB  # the limit minus what this process has mapped (a little more by now)
    assert memory.available_bytes(root=tmp_path) == free
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert memory.address_space_free() is None and memory.available_bytes(root=tmp_path) == 5 * GiB


def test_cgroup_v2_max_is_no_limit(tmp_path, psutil_says):
    psutil_says(5 * GiB)
    root = _tree(tmp_path, {"memory.max": "max", "memory.current": str(1 * GiB)})
    assert memory.cgroup_memory_free(root) is None
    assert memory.available_bytes(root=root) == 5 * GiB


def test_cgroup_v1_memory_limit_minus_usage(tmp_path, psutil_says):
    psutil_says(5 * GiB)
    root = _tree(tmp_path, {"memory/memory.limit_in_bytes": str(4 * GiB),
                            "memory/memory.usage_in_bytes": str(3 * GiB),
                            "memory/memory.stat": f"cache 5\ntotal_inactive_file {GiB // 4}"})
    assert memory.available_bytes(root=root) == GiB + GiB // 4


def test_cgroup_v1_unlimited_is_no_limit(tmp_path, psutil_says):
    psutil_says(5 * GiB)
    root = _tree(tmp_path, {"memory/memory.limit_in_bytes": "9223372036854771712",
                            "memory/memory.usage_in_bytes": str(3 * GiB)})
    assert memory.available_bytes(root=root) == 5 * GiB


def test_usage_above_the_limit_leaves_nothing(tmp_path, psutil_says):
    psutil_says(5 * GiB)
    root = _tree(tmp_path, {"memory.max": str(GiB), "memory.current": str(2 * GiB)})
    assert memory.available_bytes(root=root) == 0


@pytest.fixture
def no_psutil(monkeypatch):
    real_import = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "psutil":
            raise ImportError("No module named 'psutil'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", refuse)


def test_without_psutil_reads_meminfo(tmp_path, no_psutil):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemFree:         1000 kB\nMemAvailable:    2000000 kB\n")
    assert memory.available_bytes(root=tmp_path, meminfo=meminfo) == 2_000_000 * 1024


def test_without_psutil_meminfo_is_still_capped_by_the_cgroup(tmp_path, no_psutil):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:    2000000 kB\n")
    root = _tree(tmp_path / "cg", {"memory.max": "1000000", "memory.current": "250000"})
    assert memory.available_bytes(root=root, meminfo=meminfo) == 750_000


def test_without_psutil_or_meminfo_assumes_the_documented_default(tmp_path, no_psutil):
    assert memory.available_bytes(root=tmp_path, meminfo=tmp_path / "absent") == memory.DEFAULT_AVAILABLE == 8 * GiB


def test_module_constants_point_the_defaults(tmp_path, monkeypatch, psutil_says):
    psutil_says(5 * GiB)
    monkeypatch.setattr(memory, "CGROUP_ROOT", _tree(tmp_path, {"memory.max": "1000", "memory.current": "1"}))
    assert memory.available_bytes() == 999


@pytest.fixture
def three_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)


def test_cpus_follow_the_affinity_mask(tmp_path, three_cpus):
    assert memory.available_cpus(root=tmp_path) == 3


def test_cgroup_v2_cpu_quota_rounds_up(tmp_path, three_cpus):
    root = _tree(tmp_path, {"cpu.max": "150000 100000"})
    assert memory.cgroup_cpus(root) == 2
    assert memory.available_cpus(root=root) == 2


def test_cgroup_v2_cpu_max_is_no_quota(tmp_path, three_cpus):
    root = _tree(tmp_path, {"cpu.max": "max 100000"})
    assert memory.cgroup_cpus(root) is None
    assert memory.available_cpus(root=root) == 3


def test_cgroup_quota_above_the_mask_leaves_the_mask(tmp_path, three_cpus):
    assert memory.available_cpus(root=_tree(tmp_path, {"cpu.max": "800000 100000"})) == 3


def test_cgroup_v1_cpu_quota(tmp_path, three_cpus):
    root = _tree(tmp_path, {"cpu/cpu.cfs_quota_us": "150000", "cpu/cpu.cfs_period_us": "100000"})
    assert memory.available_cpus(root=root) == 2


def test_cgroup_v1_no_quota(tmp_path, three_cpus):
    root = _tree(tmp_path, {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"})
    assert memory.available_cpus(root=root) == 3


def test_a_quota_under_one_cpu_still_gives_one(tmp_path, three_cpus):
    assert memory.available_cpus(root=_tree(tmp_path, {"cpu.max": "20000 100000"})) == 1


def test_without_an_affinity_call_counts_the_cpus(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # macOS, Windows
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert memory.available_cpus(root=tmp_path) == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert memory.available_cpus(root=tmp_path) == 1


# --- the CPU's facts and the kernel settings chosen from them (jaxgcn.host.machine, issue 26) ----------

from jaxgcn.host import machine  # noqa: E402

EPYC_AVX512 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
               "model name\t: AMD EPYC 9B14\nflags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw\n\n"
               "processor\t: 1\nmodel name\t: another\n")
ZEN1 = ("processor\t: 0\ncpu family\t: 23\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7601\n"
        "flags\t\t: fpu sse sse2 avx avx2 fma\n")
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes\n"


def _caches(root: Path, sizes: dict[tuple[int, str], str]) -> Path:
    """A fake ``/sys/devices/system/cpu`` whose cpu0 lists these (level, type) -> size caches."""
    for i, ((level, kind), size) in enumerate(sizes.items()):
        _tree(root, {f"cpu0/cache/index{i}/level": str(level), f"cpu0/cache/index{i}/type": kind,
                     f"cpu0/cache/index{i}/size": size})
    return root


def _facts(tmp_path, cpuinfo: str, sizes: dict[tuple[int, str], str]) -> machine.Facts:
    (tmp_path / "cpuinfo").write_text(cpuinfo)
    return machine.read_facts(_caches(tmp_path / "sys", sizes), tmp_path / "cpuinfo")


ZEN1_CACHES = {(1, "Data"): "32K", (1, "Instruction"): "64K", (2, "Unified"): "512K", (3, "Unified"): "8192K"}


def test_facts_of_an_avx512_cpu_from_fake_files(tmp_path):
    f = _facts(tmp_path, EPYC_AVX512, {(1, "Data"): "48K", (1, "Instruction"): "32K", (2, "Unified"): "1024K",
                                       (3, "Unified"): "32M"})
    assert (f.cpu, f.isa, f.l1d, f.l2, f.l3, f.missing) == (
        "AMD EPYC 9B14 (family 25 model 17)", "avx512", 48 * 1024, 1024 ** 2, 32 * 1024 ** 2, ())
    # half of L2 for the tile; the cut-offs measured on 16 lanes
    assert machine.tuning_for(f) == machine.Tuning(tile_bytes=512 * 1024, product_cutoff=1 << 18, pass_cutoff=1 << 17)


def test_a_cpu_without_avx512_halves_the_cutoffs(tmp_path):
    f = _facts(tmp_path, ZEN1, ZEN1_CACHES)
    assert (f.isa, f.l1d, f.l2, f.l3) == ("avx2", 32 * 1024, 512 * 1024, 8 * 1024 ** 2)  # L1i is not L1d
    assert machine.tuning_for(f) == machine.Tuning(tile_bytes=256 * 1024, product_cutoff=1 << 17, pass_cutoff=1 << 16)


def test_a_cpu_with_neither_quarters_them_and_missing_caches_take_the_fallback(tmp_path):
    f = _facts(tmp_path, ARM, {})
    assert (f.cpu, f.isa) == ("unknown", "baseline")
    assert (f.l1d, f.l2, f.l3, f.missing) == (32 * 1024, 512 * 1024, 0, ("l1d", "l2"))
    assert machine.tuning_for(f) == machine.Tuning(tile_bytes=256 * 1024, product_cutoff=1 << 16, pass_cutoff=1 << 15)
    assert "not shown by this system, taken as usual: l1d, l2" in machine.describe(f)


def test_unreadable_files_are_the_fallback_not_an_error(tmp_path):
    broken = _caches(tmp_path / "sys", {(2, "Unified"): "lots"})  # a size that does not parse
    f = machine.read_facts(broken, tmp_path / "no-cpuinfo")
    assert (f.cpu, f.isa, f.l2, f.missing) == ("unknown", "baseline", 512 * 1024, ("l1d", "l2"))


def test_a_small_l2_keeps_a_minimum_tile(tmp_path):
    f = _facts(tmp_path, ZEN1, {(1, "Data"): "32K", (2, "Unified"): "64K"})
    assert machine.tuning_for(f).tile_bytes == machine.MIN_TILE


def test_the_report_holds_the_facts_and_the_choices(tmp_path):
    f = _facts(tmp_path, ZEN1, ZEN1_CACHES)
    r = machine.report(f)
    assert r["isa"] == "avx2" and r["l2"] == 512 * 1024 and r["tuning"]["product_cutoff"] == 1 << 17
    assert r["missing"] == [] and r["cores"] == memory.available_cpus()


def test_the_kernel_runs_with_this_machines_settings():
    import jaxgcn.native.csr as csr

    if not csr.kernel_status()[0]:
        pytest.skip(f"no csr kernel here: {csr.kernel_status()[1]}")
    assert csr.kernel_tuning() == machine.tuning()
    with pytest.raises(ValueError, match="kernel settings must be positive"):
        csr.set_kernel_tuning(machine.Tuning(0, 1, 1))


def test_every_setting_computes_the_same_sums():
    # the settings decide the regime (threads, prefetch), never the sums: bit-identical results
    import jax.numpy as jnp
    import numpy as np
    import scipy.sparse as sp

    import jaxgcn.native.csr as csr
    import jaxgcn.native.fused as fused

    if not csr.kernel_status()[0]:
        pytest.skip(f"no csr kernel here: {csr.kernel_status()[1]}")
    rng = np.random.default_rng(3)
    a = sp.random(3000, 3000, density=0.005, random_state=3, format="csr", dtype=np.float32)
    a.sort_indices()
    b = rng.standard_normal((3000, 48)).astype(np.float32)
    b[rng.random(3000) < 0.4] = 0.0  # rows the skipping pass flags
    vals = rng.standard_normal((a.nnz, 3)).astype(np.float32)
    x = jnp.asarray(rng.standard_normal((3000, 3, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((16, 3, 32)), jnp.float32)
    outputs, regimes = [], []
    every, none = machine.Tuning(machine.MIN_TILE, 1, 1), machine.Tuning(1 << 40, 1 << 40, 1 << 40)
    try:
        for tuning in (every, none, machine.tuning()):
            csr.set_kernel_tuning(tuning)
            csr.reset_kernel_counters()
            out = csr._call(jnp.asarray(a.indptr, jnp.int32), jnp.asarray(a.indices, jnp.int32), jnp.asarray(vals),
                            jnp.asarray(b), True)
            dense = fused.run_matmul(x, w)
            outputs.append((np.asarray(out), np.asarray(dense)))
            c = csr.kernel_counters()
            regimes.append((c["prefetch_calls"], c["chunked_calls"], c["skipped_rows"] > 0, c["dense_calls"]))
    finally:
        csr.set_kernel_tuning(machine.tuning())
    assert regimes[0] == (1, 1, True, 1) and regimes[1] == (0, 0, True, 1)  # each setting took its regime
    for out, dense in outputs[1:]:
        np.testing.assert_array_equal(out, outputs[0][0])
        np.testing.assert_array_equal(dense, outputs[0][1])
