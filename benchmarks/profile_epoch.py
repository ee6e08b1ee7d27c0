"""Where one epoch of the batched Cora program goes, per part, as a roofline table (issue 16).

    python benchmarks/profile_epoch.py                        # R = 1, 8, 32, 100 runs
    python benchmarks/profile_epoch.py --runs 8,16 --top 15   # other batch sizes, more single ops

For each R it compiles the program :func:`jaxgcn.batched.fit_runs` executes (``runs_per_device=R``,
paper settings, early stopping off so every execution runs the same number of epochs), times
several executions without the profiler (the epoch time: median), then runs it under
``jax.profiler.trace`` and reads the per-op events of the compiled program from the Perfetto
trace (one event per HLO thunk: fusion, dot, copy, the ``jaxgcn_spmm`` custom call). Each op is
mapped to a part of the epoch through the source stack its HLO metadata records (the
``FileNames``/``StackFrames`` tables of ``compiled.as_text()``): ``_drop_input``/``_drop_hidden``/
the key splits -> dropout, ``propagate`` -> propagations, ``matmul_runs`` (the ops') -> first layer (CSR
custom call) or dense products (dots), ``masked_sums``/L2 -> loss/metrics, optax or the fused step -> Adam,
``record_epoch``/``_select`` -> early-stopping bookkeeping. A fusion mixing parts goes to the part
owning most of its element-wise work; column "T" says how much of a part sits in fusions that
transpose between the kernel's node-major ``[n, R*H]`` layout and the ``[R, H, n]`` layouts of the
batched dots. Op times are the median execution of each op (robust to other programs' bursts)
under the profiler, which adds ~5-8% per epoch. "host/dispatch" is the share of the traced time
in which no op ran, applied to the untraced epoch (XLA may run two ops at once on the two cores,
so parts can add up to a little more than the epoch).

FLOPs and bytes are counted from the optimized HLO: a dot ``2*M*N*K``, the CSR kernel
``2*nnz*width`` (an upper bound where it skips all-zero rows of the gradient), a fusion one
operation per element of each arithmetic instruction (integer hash operations of the dropout
counted as operations); MB are the operands plus the result of each op (what it must touch at
least once). The limits it compares with are measured first: fp32 matmul peak (both cores, and
one core in a subprocess), bandwidth over 1 MB (L2), 16 MB (L3) and 512 MB (DRAM) of data (the
best of NumPy sums and copies on one and on every core, and an XLA reduction loop). Each op is
bounded by its roofline ``max(flops / peak, bytes / bandwidth of the level its operands fit)``,
for the CSR kernel also ``nnz * width * 4`` gathered bytes from the level ``b`` fits in; "roof %"
is that bound over the measured time (above 100%: the op beat the measured bandwidth, e.g. part
of ``b`` stayed in L2). Other programs on the cores inflate every time: the load average is printed.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import functools
import glob
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.batched import entries_for, init_params, run_inputs
from jaxgcn.core.data import with_focus
from jaxgcn.datasets import load_dataset, prepare
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.plan import concrete
from jaxgcn.train import TrainConfig, compile, make_batch_runner, signature
from timing import median_seconds

PARTS = (
    "first layer X·W (fwd, train+eval)",
    "first layer grad Xᵀ·g",
    "dropout (masks, RNG keys)",
    "propagations Â·h (fwd+bwd)",
    "dense products h·W (fwd+bwd)",
    "relu / bias / layout",
    "loss/metrics (+L2)",
    "Adam",
    "early-stopping bookkeeping",
    "copies / other XLA ops",
    "host/dispatch",
)
L2_BYTES, L3_BYTES = 2 << 20, 32 << 20  # per-core L2; beyond 32 MB treat as DRAM
ARITH = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "exponential", "log", "xor", "and", "or",
         "not", "shift-right-logical", "shift-left", "compare", "select", "negate", "sqrt", "rsqrt", "power", "abs",
         "exponential-minus-one", "log-plus-one", "tanh", "convert", "reduce", "clamp", "sign"}
DTYPE_BYTES = {"f32": 4, "s32": 4, "u32": 4, "pred": 1, "u8": 1, "s8": 1, "f16": 2, "bf16": 2, "f64": 8, "s64": 8,
               "u64": 8}


# --- machine limits ---------------------------------------------------------------------------------

def peak_flops(n: int = 2048) -> float:
    a = jnp.ones((n, n), jnp.float32) * 0.5
    b = jnp.ones((n, n), jnp.float32) * 0.25
    return 2.0 * n ** 3 / median_seconds(jax.jit(jnp.dot), a, b)


def bandwidth(n_bytes: int, passes: int) -> float:
    """Bytes per second over ``n_bytes`` of data: the best of an XLA reduction loop, NumPy sums and
    NumPy copies (read + write bytes counted), the NumPy ones on one thread and on one thread per
    core (each core its own half of the data: what both cores' caches give together)."""
    x = np.linspace(0.0, 1.0, n_bytes // 4, dtype=np.float32)
    y = x.copy()
    cores = max(1, len(os.sched_getaffinity(0)))
    halves = [(a, b) for a, b in zip(np.array_split(x, cores), np.array_split(y, cores))]

    def rate(fn: Any, moved: int) -> float:
        fn()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(passes):
                fn()
            times.append((time.perf_counter() - start) / passes)
        return moved / float(np.median(times))

    def threaded(work: Any) -> Any:
        def run() -> None:
            list(pool.map(work, halves))
        return run

    with concurrent.futures.ThreadPoolExecutor(cores) as pool:
        rates = [rate(x.sum, n_bytes), rate(lambda: np.copyto(y, x), 2 * n_bytes),
                 rate(threaded(lambda h: h[0].sum()), n_bytes),
                 rate(threaded(lambda h: np.copyto(h[1], h[0])), 2 * n_bytes),
                 xla_read_bandwidth(x, passes)]
    return max(rates)


def xla_read_bandwidth(host: np.ndarray, passes: int) -> float:
    """Bytes per second of ``passes`` reduction passes over one array inside one compiled loop
    (each pass depends on the previous one, so none is hoisted)."""
    x = jnp.asarray(host).reshape(-1, 1024)

    def body(_: Any, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        acc, s = carry
        t = jnp.sum(x * s, axis=0)
        return acc + t, 1.0 + t[0] * 1e-30

    run = jax.jit(lambda: jax.lax.fori_loop(0, passes, body, (jnp.zeros(1024, jnp.float32), jnp.float32(1))))
    return host.nbytes * passes / median_seconds(run, repeats=3)


def one_core_peak() -> float:
    """The matmul peak of one core: a subprocess pinned to CPU 0 with XLA's Eigen threads off."""
    env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"))
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); import sys; "
            f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
            "import profile_epoch as p; print(p.peak_flops())")
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        return float(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return float("nan")


# --- the optimized HLO: each op's source stack, FLOPs and bytes -------------------------------------

def _shape_bytes(shape: str) -> int:
    total = 0
    for dtype, dims in re.findall(r"\b(f32|s32|u32|pred|u8|s8|f16|bf16|f64|s64|u64)\[([\d,]*)\]", shape):
        total += DTYPE_BYTES[dtype] * int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
    return total


def _elements(shape: str) -> int:
    m = re.match(r"\w+\[([\d,]*)\]", shape)
    return int(np.prod([int(d) for d in m.group(1).split(",") if d] or [1])) if m else 0


class Hlo:
    """The instructions of a compiled module (``as_text()``) with each one's source functions."""

    INSTR = re.compile(r"^\s+(?:ROOT )?%([\w.\-]+) = (\(.*?\)|\w+\[[\d,]*\](?:\{[\d,]*\})?|\w+\[\]) ([\w\-]+)\((.*)$")

    def __init__(self, text: str) -> None:
        def table(name: str) -> list[str]:
            m = re.search(rf"^{name}\n(.*?)\n\n", text, re.S | re.M)
            return m.group(1).splitlines() if m else []
        files = {int(line.split()[0]): line.split(None, 1)[1].strip('"') for line in table("FileNames")}
        funcs = {int(line.split()[0]): line.split(None, 1)[1].strip('"') for line in table("FunctionNames")}
        locs = {}
        for line in table("FileLocations"):
            d = dict(re.findall(r"(\w+)=(\d+)", line))
            locs[int(line.split()[0])] = (files[int(d["file_name_id"])], funcs[int(d["function_name_id"])])
        self.frames = {}
        for line in table("StackFrames"):
            d = dict(re.findall(r"(\w+)=(\d+)", line))
            self.frames[int(line.split()[0])] = (locs[int(d["file_location_id"])], int(d["parent_frame_id"]) - 1)
        self.instr: dict[str, dict[str, Any]] = {}
        self.computations: dict[str, list[str]] = collections.defaultdict(list)
        comp = ""
        for line in text.splitlines():
            head = re.match(r"^(?:ENTRY )?%([\w.\-]+) \(", line)
            if head:
                comp = head.group(1)
                continue
            m = self.INSTR.match(line)
            if not m:
                continue
            name, shape, op, rest = m.groups()
            frame = re.search(r"stack_frame_id=(\d+)", rest)
            calls = re.search(r"calls=%([\w.\-]+)", rest)
            args = rest.split(")", 1)[0]
            self.instr[name] = {"shape": shape, "op": op, "operands": re.findall(r"%([\w.\-]+)", args),
                                "frame": int(frame.group(1)) if frame else 0,
                                "calls": calls.group(1) if calls else None,
                                "op_name": (re.search(r'op_name="([^"]*)"', rest) or [None, ""])[1], "line": rest,
                                "comp": comp}
            self.computations[comp].append(name)

    def stack(self, frame: int) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        while frame in self.frames and len(out) < 64:
            loc, frame = self.frames[frame]
            out.append(loc)
        return out

    def part_of_instr(self, name: str) -> str | None:
        ins = self.instr[name]
        for file, func in self.stack(ins["frame"]):
            if "optax" in file or func in ("fused_adam", "adam_leaf"):
                return "Adam"
            if func in ("_drop_input", "_drop_hidden", "_keep", "hash_bits", "_mix32") or func.endswith(".keys"):
                return "dropout (masks, RNG keys)"
            if func in ("xla_matmul_runs", "matmul_runs"):  # jaxgcn.core.ops: XLA's or the kernel's
                return "dense products h·W (fwd+bwd)"
            if func == "spmm" and ins["op"] != "custom-call":
                # around the kernel (its gradient rule's ops carry the forward's stack): permuting the
                # values to the transposed order, the inverse permutation, the all-zero-row flags
                inner = [f for _, f in self.stack(ins["frame"])]
                if "propagate" in inner and inner.index("propagate") < inner.index("spmm") + 2:
                    return "propagations Â·h (fwd+bwd)"
                grad = any(d in self.x_nnz for d in _dims(ins["shape"]))
                return "first layer grad Xᵀ·g" if grad else "first layer X·W (fwd, train+eval)"
            if func == "propagate":
                return "propagations Â·h (fwd+bwd)"
            if func in ("masked_sums", "metrics", "penalty", "_per_run_l2", "regularizer", "masks") \
                    or func.endswith((".metrics", ".penalty", ".regularizer", ".masks", ".per_run")):
                return "loss/metrics (+L2)"
            if func in ("record_epoch", "_select", "should_stop_early") or func.endswith(".cond") \
                    or "record_epoch" in func or "_select" in func:
                return "early-stopping bookkeeping"
            if func == "apply_runs":
                return "relu / bias / layout"
        return None

    def part(self, name: str, n_features: int) -> str:
        ins = self.instr[name]
        if ins["op"] == "custom-call" and "jaxgcn_spmm_pair" in ins["line"]:
            return "first layer X·W (fwd, train+eval)"  # the evaluation's and the next step's, one pass
        if ins["op"] == "custom-call" and "jaxgcn_spmm" in ins["line"]:
            vals = _shape_of_constraint(ins["line"], 2)
            if vals[0] in self.x_nnz:
                rows = _elements(ins["shape"]) // max(1, _dims(ins["shape"])[-1])
                return "first layer grad Xᵀ·g" if rows == n_features else "first layer X·W (fwd, train+eval)"
            return "propagations Â·h (fwd+bwd)"
        body = self.computations.get(ins["calls"], []) if ins["calls"] else [name]
        weight: collections.Counter[str] = collections.Counter()
        for sub in body:
            s = self.instr[sub]
            part = self.part_of_instr(sub)
            if part is None:
                continue
            weight[part] += max(1, _elements(s["shape"])) if s["op"] in ARITH or s["op"] in ("dot", "gather",
                                                                                            "scatter", "iota") else 1
        if not weight:
            return "copies / other XLA ops"
        return weight.most_common(1)[0][0]

    def transposes(self, name: str, min_elements: int) -> bool:
        """Whether the op moves a large array between layouts (a transpose of >= ``min_elements``)."""
        ins = self.instr[name]
        body = self.computations.get(ins["calls"], []) if ins["calls"] else [name]
        return any(self.instr[sub]["op"] == "transpose" and _elements(self.instr[sub]["shape"]) >= min_elements
                   for sub in body)

    def gathered(self, name: str) -> tuple[float, float]:
        """The CSR kernel's reads of gathered rows of ``b`` (nnz * width * 4 bytes) and the size of ``b``;
        (0, 0) for other ops."""
        ins = self.instr[name]
        if not (ins["op"] == "custom-call" and "jaxgcn_spmm" in ins["line"]):
            return 0.0, 0.0
        b = _shape_of_constraint(ins["line"], 4 if "jaxgcn_spmm_pair" in ins["line"] else 3)
        return 4.0 * _shape_of_constraint(ins["line"], 1)[0] * b[1], 4.0 * b[0] * b[1]

    def cost(self, name: str) -> tuple[float, float]:
        """(flops, bytes) of one thunk."""
        ins = self.instr[name]
        nbytes = _shape_bytes(ins["shape"]) + sum(_shape_bytes(self.instr[o]["shape"]) for o in ins["operands"]
                                                  if o in self.instr)
        if ins["op"] == "custom-call" and "jaxgcn_spmm" in ins["line"]:
            nnz = _shape_of_constraint(ins["line"], 1)[0]
            if ins["shape"].startswith("("):  # the pair: two products, one read of the operands
                width = _dims(ins["shape"][1:])[-1]
                return 4.0 * nnz * width, float(nbytes)
            width = _dims(ins["shape"])[-1]
            return 2.0 * nnz * width, float(nbytes)
        if ins["op"] == "dot":
            lhs = self.instr[ins["operands"][0]]["shape"]
            contract = [int(d) for d in re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins["line"]).group(1).split(",")
                        if d]
            k = int(np.prod([_dims(lhs)[d] for d in contract] or [1]))
            return 2.0 * _elements(ins["shape"]) * k, float(nbytes)
        if ins["op"] in ("while", "conditional", "call", "tuple", "get-tuple-element", "parameter", "constant"):
            return 0.0, 0.0
        body = self.computations.get(ins["calls"], []) if ins["calls"] else [name]
        flops = 0.0
        for sub in body:
            s = self.instr[sub]
            if s["op"] == "reduce":
                flops += sum(_elements(self.instr[o]["shape"]) for o in s["operands"][:1] if o in self.instr)
            elif s["op"] in ARITH:
                flops += _elements(s["shape"])
        return flops, float(nbytes)


def _dims(shape: str) -> list[int]:
    m = re.match(r"\w+\[([\d,]*)\]", shape)
    return [int(d) for d in m.group(1).split(",") if d] if m else []


def _shape_of_constraint(line: str, index: int) -> list[int]:
    shapes = line.split("operand_layout_constraints={", 1)[1]
    return _dims(re.findall(r"\w+\[[\d,]*\]", shapes)[index])


# --- the trace ------------------------------------------------------------------------------------

def op_times(trace_dir: str, module: str, loops: set[str]) -> tuple[dict[str, list[float]], float]:
    """Per HLO op of ``module``: its self times (s) in the trace, one per execution of the op, and
    the time (s) at least one op other than the while loops ``loops`` ran (union over threads)."""
    path = glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True)[-1]
    with gzip.open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    by_thread: dict[Any, list[dict[str, Any]]] = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and not e["name"].startswith("end: ") and "dur" in e:
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    self_time: dict[str, list[float]] = collections.defaultdict(list)
    leaves: list[tuple[float, float]] = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict[str, Any]] = []
        for e in evs:
            e["child"] = 0.0
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            if stack:
                stack[-1]["child"] += e["dur"]
            stack.append(e)
        for e in evs:
            args = e.get("args", {})
            if args.get("hlo_module") != module:
                continue
            if e["name"] == args.get("hlo_op"):
                self_time[e["name"]].append(max(0.0, e["dur"] - e["child"]) * 1e-6)
                if e["name"] not in loops:
                    leaves.append((e["ts"], e["ts"] + e["dur"]))
    leaves.sort()
    busy, end = 0.0, -1.0
    for a, b in leaves:
        if b > end:
            busy += b - max(a, end)
            end = b
    return dict(self_time), busy * 1e-6


# --- one batch size ---------------------------------------------------------------------------------

def profile(prepared: Any, r: int, seconds: float, repeat: int, limits: dict[str, float],
            hidden: int = 16) -> dict[str, Any]:
    """Time and trace the batched program of ``r`` runs; each execution runs about ``seconds``."""
    # the paper's 200 epochs (the history buffers' length); each execution stops earlier
    model_config, config = GCNConfig(hidden=hidden), TrainConfig(early_stopping=None)
    # as fit_runs trains it: the loss and metrics on the masked nodes, the gradient on the rows it reaches
    execution = concrete(Execution(backend=prepared.backend), prepared.data.graph)
    data = with_focus(prepared.data, model_config.layers, execution.ops.prepare)
    n_features = int(data.x.shape[1])
    entries = entries_for(list(range(r)), model_config=model_config, config=config)
    params = init_params(model_config, entries, n_features, prepared.n_classes)
    runs, seeds = run_inputs(entries), jnp.asarray([e.seed for e in entries], jnp.int32)
    runner = make_batch_runner(model_config, config, execution)  # as fit_runs compiles it (one device)
    key = ("profile", model_config, config, execution, signature(data), r)
    init, run_until = compile(key, runner, (params, seeds, runs), data)[:2]
    hlo = Hlo(run_until.as_text())
    hlo.x_nnz = {int(data.x.cols.shape[0])}  # the features' products: every entry, or the gradient's reached ones
    reached = getattr(data.aux, "x_reached", None)  # the kernel's cut features (jaxgcn.core.native_ops.prepare)
    if reached is not None:
        hlo.x_nnz.add(int(reached.t_rows.shape[0]))

    def execute(epochs: int) -> float:
        state = init(params, seeds, runs)
        jax.block_until_ready(state)
        start = time.perf_counter()
        jax.block_until_ready(run_until(state, data, runs, jnp.int32(epochs)))
        return time.perf_counter() - start

    epochs = int(np.clip(seconds / (execute(5) / 5), 5, config.epochs))
    execute = functools.partial(execute, epochs)
    execute()
    timed = [execute() for _ in range(repeat)]
    epoch_s, best_s = float(np.median(timed)) / epochs, min(timed) / epochs
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            traced = [execute() for _ in range(2)]
        loops = {name for name, ins in hlo.instr.items() if ins["op"] == "while"}
        times, busy = op_times(tmp, "jit_run_until", loops)
    n_epochs = 2 * epochs
    parts = {p: {"s": 0.0, "flops": 0.0, "bytes": 0.0, "roof": 0.0, "n": 0.0, "bound": collections.Counter(),
                 "transposing": 0.0} for p in PARTS}
    ops = []
    n_nodes = int(data.labels.shape[0])
    for name, samples in times.items():
        if name not in hlo.instr:
            continue
        # the median execution times the executions per epoch: robust to other programs' bursts
        t = float(np.median(samples)) * len(samples)
        ins = hlo.instr[name]
        part = hlo.part(name, n_features)
        if ins["op"] == "while" and ins["comp"].startswith("main"):
            part = "host/dispatch"  # the epoch loop's own time: condition, copies of the carry
        flops, nbytes = hlo.cost(name)
        t /= n_epochs
        level = _level(nbytes)
        t_flop, t_mem = flops / limits["peak"], nbytes / limits[level]
        gather, b_bytes = hlo.gathered(name)
        if gather / limits[_level(b_bytes)] > t_mem:  # the kernel's row gathers, from where b fits
            level, t_mem = _level(b_bytes), gather / limits[_level(b_bytes)]
        p = parts[part]
        p["s"] += t
        p["n"] += len(samples) / n_epochs
        if hlo.transposes(name, 4 * n_nodes * r):
            p["transposing"] += t
        p["flops"] += flops
        p["bytes"] += nbytes
        p["roof"] += max(t_flop, t_mem)
        p["bound"]["compute" if t_flop >= t_mem else level] += max(t_flop, t_mem)
        ops.append((t, name, part, ins["shape"], flops, nbytes, hlo.transposes(name, 4 * n_nodes * r)))
    # the share of the traced time in which no op ran (the while loop's own condition and the
    # executor's dispatch), applied to the untraced epoch
    dispatch = epoch_s * max(0.0, 1.0 - busy / sum(traced))
    parts["host/dispatch"]["s"] += dispatch
    return {"r": r, "epoch_s": epoch_s, "best_s": best_s, "traced_s": float(np.median(traced)) / epochs,
            "busy_s": busy / n_epochs, "parts": parts, "ops": sorted(ops, reverse=True), "epochs": epochs}


def _level(nbytes: float) -> str:
    return "L2" if nbytes <= L2_BYTES else "L3" if nbytes <= L3_BYTES else "DRAM"


def print_table(res: dict[str, Any], top: int) -> None:
    r, epoch = res["r"], res["epoch_s"]
    print(f"\n### R = {r}: {epoch * 1e3:.2f} ms per epoch (median; min {res['best_s'] * 1e3:.2f} ms), "
          f"{epoch * 1e3 / r:.3f} ms per run-epoch ("
          f"{res['epochs']} epochs per execution; under the profiler {res['traced_s'] * 1e3:.2f} ms, "
          f"ops busy {res['busy_s'] * 1e3:.2f} ms)\n")
    print("| part | ms/epoch | % epoch | of which T ms | MFLOP | MB | GFLOP/s | GB/s | roof ms | roof % | bound |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    total = collections.Counter()
    for name in PARTS:
        p = res["parts"][name]
        if p["s"] == 0.0 and name != "host/dispatch":
            continue
        ms = p["s"] * 1e3
        gfs = p["flops"] / p["s"] / 1e9 if p["s"] > 0 and p["flops"] else 0.0
        gbs = p["bytes"] / p["s"] / 1e9 if p["s"] > 0 and p["bytes"] else 0.0
        bound = p["bound"].most_common(1)[0][0] if p["bound"] else "-"
        if p["roof"] and p["roof"] < 0.1 * p["s"]:  # far from its roof: small ops, or the access pattern
            bound += " (overhead)" if p["s"] / max(p["n"], 1.0) < 20e-6 else " (access pattern)"
        roof_pct = f"{100 * p['roof'] / p['s']:.0f}" if p["s"] > 0 and p["roof"] else "-"
        print(f"| {name} | {ms:.3f} | {100 * p['s'] / epoch:.1f} | {p['transposing'] * 1e3:.3f} | "
              f"{p['flops'] / 1e6:.2f} | {p['bytes'] / 1e6:.2f} | "
              f"{gfs:.1f} | {gbs:.1f} | {p['roof'] * 1e3:.3f} | {roof_pct} | {bound} |")
        total.update({"s": p["s"], "flops": p["flops"], "bytes": p["bytes"], "roof": p["roof"]})
    trans = sum(p["transposing"] for p in res["parts"].values())
    print(f"| **sum** | {total['s'] * 1e3:.3f} | {100 * total['s'] / epoch:.1f} | {trans * 1e3:.3f} | "
          f"{total['flops'] / 1e6:.2f} | "
          f"{total['bytes'] / 1e6:.2f} | | | {total['roof'] * 1e3:.3f} | {100 * total['roof'] / epoch:.0f} | |")
    if top:
        print(f"\nT: fusions that transpose [n, R, H] <-> [R, H, n] (the layouts of the batched dots): "
              f"{trans * 1e3:.3f} ms ({100 * trans / epoch:.1f}%)")
        print(f"top {top} ops of R = {r} (ms per epoch, part, result shape, MFLOP, MB; T: transposes):")
        for t, name, part, shape, flops, nbytes, tr in res["ops"][:top]:
            print(f"  {t * 1e3:8.3f}  {name:28s} {part:34s} {shape[:30]:30s} {flops / 1e6:8.2f} {nbytes / 1e6:7.2f}"
                  f"{' T' if tr else ''}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--runs", default="1,8,32,100", help="comma-separated batch sizes R (runs per device)")
    ap.add_argument("--seconds", type=float, default=1.0, help="target length of one timed execution")
    ap.add_argument("--repeat", type=int, default=7, help="timed executions per R (median)")
    ap.add_argument("--top", type=int, default=8, help="single ops listed per R")
    ap.add_argument("--hidden", type=int, default=16, help="hidden width of every run (the paper's 16)")
    ap.add_argument("--no-one-core", action="store_true", help="skip the one-core peak (a subprocess)")
    args = ap.parse_args()

    print(f"{args.dataset}, {os.cpu_count()} CPU(s), jax {jax.__version__}, load average before "
          f"{os.getloadavg()[0]:.2f} (other programs on the cores inflate every time below)")
    limits = {"peak": peak_flops(), "L2": bandwidth(1 << 20, 400), "L3": bandwidth(16 << 20, 40),
              "DRAM": bandwidth(512 << 20, 3)}
    one = float("nan") if args.no_one_core else one_core_peak()
    print(f"limits: fp32 matmul 2048^3 {limits['peak'] / 1e9:.1f} GFLOP/s (all cores), {one / 1e9:.1f} GFLOP/s "
          f"(one core) | bandwidth 1 MB (L2) {limits['L2'] / 1e9:.1f} GB/s, 16 MB (L3) "
          f"{limits['L3'] / 1e9:.1f} GB/s, 512 MB (DRAM) {limits['DRAM'] / 1e9:.1f} GB/s")
    prepared = prepare(load_dataset(args.dataset))
    x = prepared.data.x
    print(f"graph: {prepared.info['n_nodes']} nodes, {int(x.cols.shape[0])} feature non-zeros "
          f"({int(x.shape[1])} features), {int(prepared.data.graph.csr.cols.shape[0])} off-diagonal adjacency "
          f"entries + {prepared.info['n_nodes']} self-loops, {prepared.n_classes} classes, backend {prepared.backend}")
    results = []
    for r in [int(v) for v in args.runs.split(",")]:
        res = profile(prepared, r, args.seconds, args.repeat, limits, args.hidden)
        print_table(res, args.top)
        results.append(res)
    print("\nms per run-epoch, by part (growth with R):\n")
    print("| part | " + " | ".join(f"R={res['r']}" for res in results) + " |")
    print("|---|" + "---:|" * len(results))
    for name in PARTS:
        cells = [res["parts"][name]["s"] * 1e3 / res["r"] for res in results]
        print(f"| {name} | " + " | ".join(f"{c:.4f}" for c in cells) + " |")
    print("| *of which transposing fusions* | " + " | ".join(
        f"{sum(p['transposing'] for p in res['parts'].values()) * 1e3 / res['r']:.4f}" for res in results) + " |")
    print("| **epoch** | " + " | ".join(f"{res['epoch_s'] * 1e3 / res['r']:.4f}" for res in results) + " |")
    conclude(results)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


def conclude(results: list[dict[str, Any]]) -> None:
    """Which parts grow faster than R, and the roofline floor of the largest batch."""
    if len(results) < 2:
        return
    base = min(results[1:] if len(results) > 2 else results, key=lambda res: res["epoch_s"] / res["r"])
    last = results[-1]
    print(f"\nconclusion (per run-epoch, R = {last['r']} against R = {base['r']}, the cheapest batch per run):")
    for name in PARTS:
        a, b = base["parts"][name]["s"] / base["r"], last["parts"][name]["s"] / last["r"]
        if a > 0 and b / a > 1.3 and (b - a) * last["r"] > 0.02 * last["epoch_s"]:
            levels = last["parts"][name]["bound"]
            print(f"- {name}: {a * 1e3:.3f} -> {b * 1e3:.3f} ms ({b / a:.1f}x), "
                  f"{(b - a) * last['r'] * 1e3:.1f} ms of the {last['r']}-run epoch; its ops' data at "
                  f"R = {last['r']}: {', '.join(sorted(levels))}; "
                  f"{100 * last['parts'][name]['transposing'] / last['parts'][name]['s']:.0f}% in transposing fusions")
    roof = sum(p["roof"] for p in last["parts"].values())
    print(f"- floor of one R = {last['r']} epoch with these ops (each at its roofline): {roof * 1e3:.1f} ms "
          f"({roof * 1e3 / last['r']:.3f} ms per run-epoch) against {last['epoch_s'] * 1e3:.1f} ms measured")


if __name__ == "__main__":
    sys.exit(main())
