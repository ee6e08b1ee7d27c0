"""A two-layer GCN (Kipf & Welling, ICLR 2017, arXiv:1609.02907) on Cora, from scratch, in one file.

Read top to bottom: data -> normalized adjacency (dense and message passing) -> params -> loss ->
jitted train step (SGD by hand, Adam from optax) -> patience early stopping -> many seeds with vmap.
Paper settings: hidden 16, dropout 0.5, lr 0.01, L2 5e-4 on the first layer, 200 epochs.
examples/README.md maps each part to where the jaxgcn package does the same thing faster.

    python examples/gcn_from_scratch.py
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxgcn

HIDDEN, DROPOUT, LR, WEIGHT_DECAY, EPOCHS, PATIENCE = 16, 0.5, 0.01, 5e-4, 200, 50


class Cora(NamedTuple):  # a pytree: jit sees arrays with static shapes, n_nodes = labels.shape[0]
    senders: jax.Array  # [n_edges] message sources, self-loops included
    receivers: jax.Array  # [n_edges] message targets
    norm: jax.Array  # [n_edges] the entry of D^-1/2 (A+I) D^-1/2 for each edge
    x_rows: jax.Array  # [nnz] the sparse features as (row, col, value): dropout acts on the
    x_cols: jax.Array  # ~49k non-zeros, as in Kipf's code (a dense 2708x1433 mask costs ~120 ms)
    x_vals: jax.Array  # [nnz] row-normalized values
    labels: jax.Array  # [n_nodes] class ids
    masks: jax.Array  # [3, n_nodes] float 0/1: train, val, test (masks, not boolean indexing)


def load_cora() -> tuple[Cora, int, int]:
    """Cora as device arrays, cleaned on the host with NumPy, plus (n_features, n_classes)."""
    raw = jaxgcn.load_dataset("cora")  # raw edge list: 302 duplicates, one-way entries
    n = raw.labels.shape[0]
    s, r = raw.senders[raw.senders != raw.receivers], raw.receivers[raw.senders != raw.receivers]
    pairs = np.unique(np.concatenate([np.stack([s, r], 1), np.stack([r, s], 1)]), axis=0)  # symmetric, unique
    senders = np.concatenate([pairs[:, 0], np.arange(n)])  # + I: every node hears itself
    receivers = np.concatenate([pairs[:, 1], np.arange(n)])
    inv_sqrt = np.bincount(receivers, minlength=n).astype(np.float32) ** -0.5
    feats = raw.features.tocoo()  # scipy COO: .row, .col, .data
    row_sums = np.bincount(feats.row, feats.data, n)  # Kipf's row normalization: each row sums to 1
    vals = feats.data / np.where(row_sums > 0, row_sums, 1.0)[feats.row]
    masks = np.zeros((3, n), np.float32)
    for i, split in enumerate(("train", "val", "test")):
        masks[i, raw.splits[split]] = 1.0
    data = Cora(*map(jnp.asarray, (senders, receivers, inv_sqrt[senders] * inv_sqrt[receivers], feats.row,
                                   feats.col, vals.astype(np.float32), raw.labels, masks)))
    return data, raw.features.shape[1], int(raw.labels.max()) + 1


def dense_adjacency(data: Cora) -> jax.Array:
    """[n, n] D^-1/2 (A+I) D^-1/2 built as a matrix: fine for small graphs (n^2 memory)."""
    n = data.labels.shape[0]
    a = jnp.zeros((n, n), jnp.float32).at[data.receivers, data.senders].add(1.0)  # A + I
    d = jnp.sum(a, axis=1) ** -0.5
    return d[:, None] * a * d[None, :]


def propagate(data: Cora, h: jax.Array) -> jax.Array:
    """Â·h as message passing, O(edges): each edge sends norm * h[sender], receivers sum them."""
    messages = data.norm[:, None] * h[data.senders]
    return jax.ops.segment_sum(messages, data.receivers, num_segments=data.labels.shape[0])


def init_params(key: jax.Array, n_features: int, n_classes: int) -> dict[str, Any]:
    """Glorot-uniform weights, no bias (Kipf's code): plain nested dicts are pytrees."""
    k0, k1 = jax.random.split(key)
    glorot = jax.nn.initializers.glorot_uniform()
    return {"layer_0": {"w": glorot(k0, (n_features, HIDDEN), jnp.float32)},
            "layer_1": {"w": glorot(k1, (HIDDEN, n_classes), jnp.float32)}}


def dropout(key: jax.Array, x: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(key, 1.0 - DROPOUT, x.shape)
    return jnp.where(keep, x / (1.0 - DROPOUT), 0.0)


def forward(params: dict, data: Cora, key: jax.Array | None, train: bool) -> jax.Array:
    """[n_nodes, n_classes] logits of Â relu(Â drop(X) W0) W1, with drop() only when training."""
    vals = data.x_vals
    if train:  # a Python `if` on `train`: it must be a concrete bool, hence static_argnames below
        k_in, k_hidden = jax.random.split(key)  # one key per consumer, never reused
        vals = dropout(k_in, vals)
    xw = jax.ops.segment_sum(vals[:, None] * params["layer_0"]["w"][data.x_cols], data.x_rows,
                             num_segments=data.labels.shape[0])  # sparse X @ W0
    h = jax.nn.relu(propagate(data, xw))  # transform, then aggregate
    if train:
        h = dropout(k_hidden, h)
    return propagate(data, h @ params["layer_1"]["w"])


# `train` is static: under jit a plain argument becomes a tracer, and `if train:` on a tracer raises
# TracerBoolConversionError. Static, each value (True/False) gets its own compiled program.
@functools.partial(jax.jit, static_argnames=("train",))
def loss_and_acc(params: dict, data: Cora, key: jax.Array | None, split: int, train: bool) -> tuple:
    """Masked mean cross-entropy and accuracy over one split (0 train, 1 val, 2 test)."""
    logits, mask = forward(params, data, key, train), data.masks[split]
    nll = -jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(data.labels, logits.shape[-1]), axis=-1)
    acc = jnp.sum((jnp.argmax(logits, -1) == data.labels).astype(jnp.float32) * mask) / jnp.sum(mask)
    return jnp.sum(nll * mask) / jnp.sum(mask), acc


def objective(params: dict, data: Cora, key: jax.Array) -> tuple:
    """What the gradient sees: training cross-entropy with dropout + L2 on the FIRST layer's weights
    (Kipf's weight decay, ADDED to the loss; optax.adamw's decoupled decay would be another method)."""
    loss, acc = loss_and_acc(params, data, key, 0, train=True)
    return loss + WEIGHT_DECAY * 0.5 * jnp.sum(params["layer_0"]["w"] ** 2), acc


def sgd_update(params: dict, grads: dict, lr: float = LR) -> dict:
    """Plain gradient descent on every leaf of the params tree: p <- p - lr * g."""
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)


def make_optimizer(name: str) -> tuple:
    """(init, update): update(grads, opt_state, params) -> (new params, new opt_state)."""
    if name == "sgd":
        return (lambda params: (), lambda grads, state, params: (sgd_update(params, grads), state))
    adam = optax.adam(LR)  # the paper's optimizer; optax keeps the moments in opt_state

    def update(grads: dict, state: Any, params: dict) -> tuple:
        # Adam's bias correction is 1 - decay**count (Python float ** int32): JAX's default dtype
        # promotion allows it; say so, for code run under strict promotion (as the tests are)
        with jax.numpy_dtype_promotion("standard"):
            updates, state = adam.update(grads, state, params)
        return optax.apply_updates(params, updates), state
    return adam.init, update


class State(NamedTuple):  # everything one run carries from epoch to epoch (a pytree: vmap stacks it)
    params: dict
    opt_state: Any
    key: jax.Array
    best_params: dict
    best_val: jax.Array  # [2]: best validation accuracy, its validation loss
    best_epoch: jax.Array
    epoch: jax.Array
    done: jax.Array


def init_state(key: jax.Array, n_features: int, n_classes: int, optimizer: str) -> State:
    k_init, k_run = jax.random.split(key)
    params = init_params(k_init, n_features, n_classes)
    return State(params, make_optimizer(optimizer)[0](params), k_run, params, jnp.array([-1.0, jnp.inf]),
                 jnp.int32(0), jnp.int32(0), jnp.bool_(False))


def make_epoch(optimizer: str):
    """One epoch of one run: dropout step, validation, patience bookkeeping. Pure, so vmap-able."""
    update = make_optimizer(optimizer)[1]

    def epoch(state: State, data: Cora) -> State:
        key, k_drop = jax.random.split(state.key)  # a fresh dropout key every epoch
        (_, _), grads = jax.value_and_grad(objective, has_aux=True)(state.params, data, k_drop)
        params, opt_state = update(grads, state.opt_state, state.params)
        val_loss, val_acc = loss_and_acc(params, data, None, 1, train=False)
        # best = highest validation accuracy, ties broken by lower validation loss
        better = (val_acc > state.best_val[0]) | ((val_acc == state.best_val[0]) & (val_loss < state.best_val[1]))
        pick = lambda new, old: jnp.where(better, new, old)  # noqa: E731 - masks, not `if`: works under vmap
        best_epoch = pick(state.epoch + 1, state.best_epoch)
        new = State(params, opt_state, key, jax.tree.map(pick, params, state.best_params),
                    pick(jnp.stack([val_acc, val_loss]), state.best_val), best_epoch, state.epoch + 1,
                    state.epoch + 1 - best_epoch >= PATIENCE)  # stop PATIENCE epochs after the best
        # a run that has stopped keeps its state (matters when vmap trains runs that stop apart)
        return jax.tree.map(lambda old, nxt: jnp.where(state.done, old, nxt), state, new)
    return jax.jit(epoch)


def train(seed: int = 0, optimizer: str = "adam", epochs: int = EPOCHS, log: bool = True) -> dict:
    """Train one GCN; stop PATIENCE epochs after the best validation accuracy and test its params."""
    data, n_features, n_classes = load_cora()
    state, epoch = init_state(jax.random.key(seed), n_features, n_classes, optimizer), make_epoch(optimizer)
    for e in range(1, epochs + 1):
        state = epoch(state, data)
        if log and e % 20 == 0:
            val_loss, val_acc = loss_and_acc(state.params, data, None, 1, train=False)
            print(f"epoch {e:3d} | val loss {float(val_loss):.4f} | val acc {float(val_acc):.4f}")
        if bool(state.done):
            break
    test_acc = loss_and_acc(state.best_params, data, None, 2, train=False)[1]
    return {"test_acc": float(test_acc), "val_acc": float(state.best_val[0]), "epochs": int(state.epoch),
            "best_epoch": int(state.best_epoch)}


def train_seeds(seeds: list[int], optimizer: str = "adam", epochs: int = EPOCHS) -> dict:
    """Several seeds initialised and trained AT ONCE: vmap adds a run axis to every array of State.

    The jaxgcn package does not vmap this way: vmap turns the gather + segment_sum into a batched
    scatter, measured SLOWER on CPU than running the seeds one after another. It stacks the runs
    in the feature axis instead ([n, R * hidden]), so ONE propagation serves every run.
    """
    data, n_features, n_classes = load_cora()
    keys = jnp.stack([jax.random.key(s) for s in seeds])
    state = jax.vmap(lambda k: init_state(k, n_features, n_classes, optimizer))(keys)
    epoch = jax.jit(jax.vmap(make_epoch(optimizer), in_axes=(0, None)))  # data is shared, not batched
    for _ in range(epochs):
        state = epoch(state, data)
        if bool(jnp.all(state.done)):
            break
    test_acc = jax.vmap(lambda p: loss_and_acc(p, data, None, 2, train=False)[1])(state.best_params)
    return {"test_acc": np.asarray(test_acc), "val_acc": np.asarray(state.best_val[:, 0]),
            "epochs": np.asarray(state.epoch)}


def main() -> None:
    data, _, _ = load_cora()
    h = jax.random.normal(jax.random.key(0), (data.labels.shape[0], HIDDEN))
    gap = float(jnp.max(jnp.abs(dense_adjacency(data) @ h - propagate(data, h))))
    print(f"dense Â·h vs segment_sum Â·h: max difference {gap:.2e}")
    for optimizer in ("sgd", "adam"):  # SGD at lr 0.01 barely moves in 200 epochs: why the paper uses Adam
        print(f"--- {optimizer} ---")
        result = train(seed=0, optimizer=optimizer)
        print(f"{optimizer}: test acc {result['test_acc']:.4f} (best val {result['val_acc']:.4f} at epoch "
              f"{result['best_epoch']}, {result['epochs']} epochs run)")
    many = train_seeds(list(range(5)))
    print(f"adam, 5 seeds with vmap: test acc {many['test_acc'].mean():.4f} ± {many['test_acc'].std():.4f}")


if __name__ == "__main__":
    main()
