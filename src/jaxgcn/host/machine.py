"""What this machine is, read once, and the choices jaxgcn makes from it instead of constants.

The csr kernel's speed depends on the CPU it runs on: the width of its vector unit (AVX-512's 16
floats, AVX2's 8), the size of one core's L2 and the number of cores. :func:`facts` reads them
once (``/proc/cpuinfo``, ``/sys/devices/system/cpu/cpu0/cache``, the affinity mask and cgroup quota of
:func:`jaxgcn.host.memory.available_cpus`; a
documented fallback for each fact a system does not show) and :func:`tuning_for` turns them into
the kernel's settings:

- ``tile_bytes``: the kernel prefetches rows of ``b`` ahead when ``b`` is larger than this, half of
  one core's L2 (a smaller ``b`` stays cached; 256 KiB on a 512 KiB L2, the value first chosen by hand);
- ``product_cutoff`` / ``pass_cutoff``: the work (multiply-adds) from which a product, and a pass
  over ``b``, is cut into chunks for the thread pool. Handing chunks to other threads costs a
  fixed few microseconds; a core does work in that time in proportion to its vector width, so the
  break-even work scales with the lanes: 2^18 / 2^17 for 16 lanes (measured on an AVX-512 EPYC),
  2^17 / 2^16 for AVX2's 8, 2^16 / 2^15 for 4 (SSE, NEON).

Every choice changes how fast, never what is computed: a row of a product is summed by one thread
in the same order whatever the chunks, and prefetching reads nothing into the sums
(``tests/test_machine.py`` checks the results bit for bit). ``jaxgcn info`` and the ``record`` of
``--json`` show the facts and the choices (:func:`report`).

Imports only the standard library: the command line's help reads :data:`REORDER_MIN_NODES`
without starting JAX.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from jaxgcn.host.memory import available_cpus

REORDER_MIN_NODES = 100_000  # below this the features fit in cache and renumbering gains little

SYS_CPU = Path("/sys/devices/system/cpu")
CPUINFO = Path("/proc/cpuinfo")

# What a fact is taken to be where the system does not show it (one core's share, in bytes): a
# common x86 server core (32 KiB L1d, 512 KiB L2); the L3 is only reported.
FALLBACK_CACHES = {"l1d": 32 * 1024, "l2": 512 * 1024, "l3": 0}
LANES = {"avx512": 16, "avx2": 8, "baseline": 4}  # floats per vector register
BASE_LANES = 16  # the cut-offs below were measured on this width (an AVX-512 EPYC)
PRODUCT_CUTOFF = 1 << 18  # at BASE_LANES
PASS_CUTOFF = 1 << 17  # at BASE_LANES
MIN_TILE = 64 * 1024


@dataclasses.dataclass(frozen=True)
class Facts:
    """The facts the choices are made from; ``missing`` names those taken from the fallback."""

    cpu: str  # "AMD EPYC 7B13 (family 25 model 1)"
    isa: str  # "avx512", "avx2" or "baseline": the widest vector unit the kernel's compiler targets
    cores: int  # the CPUs this process may use (jaxgcn.host.memory.available_cpus)
    l1d: int  # bytes, one core's
    l2: int  # bytes, one core's
    l3: int  # bytes, one instance (shared by several cores); 0: none shown
    missing: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The kernel's settings (module docstring)."""

    tile_bytes: int
    product_cutoff: int
    pass_cutoff: int


def _size(text: str) -> int:
    """``"32K"``, ``"1024K"``, ``"32M"`` or bytes -> bytes (sysfs' cache ``size``).

    >>> _size("512K"), _size("32M"), _size("4096")
    (524288, 33554432, 4096)
    """
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def read_caches(sys_cpu: Path = SYS_CPU) -> dict[str, int]:
    """``{"l1d": bytes, "l2": bytes, "l3": bytes}`` of cpu0's caches as sysfs lists them (each
    ``cache/index*/`` has ``level``, ``type`` and ``size``); the levels it does not list are absent."""
    found: dict[str, int] = {}
    for index in sorted((sys_cpu / "cpu0" / "cache").glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        name = "l1d" if level == 1 else f"l{level}"
        if name in FALLBACK_CACHES:
            found[name] = size
    return found


def cpuinfo_fields(cpuinfo: Path = CPUINFO) -> dict[str, str]:
    """The first processor's fields in ``/proc/cpuinfo``, names in lower case (``"model name"``,
    ``"flags"`` on x86, ``"features"`` on ARM); ``{}`` where the file cannot be read. :func:`read_cpu`
    and the kernel build's key (:mod:`jaxgcn.native.kernel_build`) both read it here."""
    try:
        lines = cpuinfo.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            break  # the first processor's block is enough
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    return fields


def cpu_flags(fields: dict[str, str]) -> str:
    """The flags line of :func:`cpuinfo_fields` (``"flags"`` on x86, ``"features"`` on ARM), ``""``
    where there is none: :func:`read_cpu` reads the ISA from it, the kernel build keys on it."""
    return fields.get("flags") or fields.get("features") or ""


def read_cpu(cpuinfo: Path = CPUINFO) -> tuple[str, str]:
    """``(cpu, isa)`` from ``/proc/cpuinfo``: the model name with its family and model numbers, and
    the widest vector unit its flags show (``avx512f``, ``avx2``; anything else, and a file that
    cannot be read, is ``baseline``)."""
    fields = cpuinfo_fields(cpuinfo)
    if not fields:
        return "unknown", "baseline"
    flags = set(cpu_flags(fields).split())
    isa = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "baseline"
    name = fields.get("model name") or fields.get("cpu model") or "unknown"
    if "cpu family" in fields and "model" in fields:
        name = f"{name} (family {fields['cpu family']} model {fields['model']})"
    return name, isa


def read_facts(sys_cpu: Path = SYS_CPU, cpuinfo: Path = CPUINFO) -> Facts:
    """:class:`Facts` from these files (tests pass a fake tree); :func:`facts` is this machine's."""
    cpu, isa = read_cpu(cpuinfo)
    caches = read_caches(sys_cpu)
    missing = tuple(name for name in ("l1d", "l2") if name not in caches)  # an L3 is only reported
    return Facts(cpu=cpu, isa=isa, cores=available_cpus(), missing=missing, **{**FALLBACK_CACHES, **caches})


@functools.lru_cache(maxsize=None)
def facts() -> Facts:
    """This machine's :class:`Facts`, read once per process."""
    return read_facts()


def tuning_for(f: Facts) -> Tuning:
    """The kernel's settings for a machine with facts ``f`` (module docstring).

    >>> tuning_for(Facts("x", "avx2", 2, 32768, 524288, 33554432))
    Tuning(tile_bytes=262144, product_cutoff=131072, pass_cutoff=65536)
    >>> tuning_for(Facts("x", "avx512", 2, 49152, 1048576, 33554432))
    Tuning(tile_bytes=524288, product_cutoff=262144, pass_cutoff=131072)
    """
    scale = LANES[f.isa] / BASE_LANES
    return Tuning(tile_bytes=max(MIN_TILE, f.l2 // 2), product_cutoff=int(PRODUCT_CUTOFF * scale),
                  pass_cutoff=int(PASS_CUTOFF * scale))


def tuning() -> Tuning:
    """This machine's :class:`Tuning`."""
    return tuning_for(facts())


def _bytes(n: int) -> str:
    return f"{n // 1024 ** 2} MiB" if n >= 1024 ** 2 and n % 1024 ** 2 == 0 else f"{n // 1024} KiB"


def report(f: Facts | None = None) -> dict[str, Any]:
    """The facts and the choices as JSON values (``jaxgcn info --json``, ``--json``'s record)."""
    f = facts() if f is None else f
    return {**dataclasses.asdict(f), "missing": list(f.missing), "tuning": dataclasses.asdict(tuning_for(f))}


def describe(f: Facts | None = None) -> str:
    """One line for ``jaxgcn info``.

    >>> describe(Facts("EPYC", "avx2", 2, 32768, 524288, 33554432)).split(" | ")  # doctest: +NORMALIZE_WHITESPACE
    ['machine: EPYC, avx2, 2 cores, L1d 32 KiB, L2 512 KiB, L3 32 MiB',
     'kernel: prefetch above 256 KiB, threads from 131,072 (products) / 65,536 (passes) multiply-adds']
    """
    f = facts() if f is None else f
    t = tuning_for(f)
    caches = ", ".join(f"{name.upper() if name != 'l1d' else 'L1d'} {_bytes(getattr(f, name))}"
                       for name in ("l1d", "l2", "l3") if getattr(f, name))
    guessed = f" (not shown by this system, taken as usual: {', '.join(f.missing)})" if f.missing else ""
    return (f"machine: {f.cpu}, {f.isa}, {f.cores} cores, {caches}{guessed} | kernel: prefetch above "
            f"{_bytes(t.tile_bytes)}, threads from {t.product_cutoff:,} (products) / {t.pass_cutoff:,} (passes) "
            f"multiply-adds")
