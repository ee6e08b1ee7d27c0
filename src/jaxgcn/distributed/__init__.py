"""Full-graph GCN training sharded over devices and processes: nodes in P contiguous row blocks.

Device p owns nodes ``[p * L, (p + 1) * L)`` (the node count padded to ``P * L``): their features,
labels, masks, self-loop weights and the rows of the adjacency for the edges pointing INTO them, as
a local CSR block. Under ``jax.shard_map`` each propagation first gathers the source rows the block
needs, then aggregates its own rows: with the fused kernel on the CPU, with XLA's gather and
segment sum on GPUs/TPUs (:func:`jaxgcn.native.csr.csr_matmul`). Two exchanges:

- ``all_gather`` (the simple baseline): every device receives every node's (transformed) features;
  the block's columns are global node ids. Per device: ``P * L`` rows of width ``w``.
- ``halo``: device q sends device p only the rows of q that p's edges read (an ``all_to_all`` of
  ``[P, H, w]`` buffers, H = the largest such set over all pairs); the block's columns index
  ``[own L rows | H rows from device 0 | ... | H rows from device P-1]``. Per device:
  ``L + P * H`` rows. H is small when the numbering has locality (see :func:`partition_stats` and
  :func:`jaxgcn.core.graph.reorder`), and about L on a graph without any.

The gradient of either exchange is its transpose (a reduce-scatter, or the reverse all-to-all),
which autodiff derives. No message is lost at partition borders: the sharded model equals the
single-device one (tested on a graph whose edges cross every border, for both exchanges).

The model code is unchanged: the sharded model is ``gcn(config, propagate=propagate_block)``, the
one forward pass with the block exchange injected as its aggregation (:func:`sharded_model`). The
training loop (:func:`make_sharded_runner`) is the single-device one (same ``RunState``, same
early-stopping rule) with the loss and metrics summed over devices.

Several processes (hosts) form one job with ``jax.distributed.initialize`` (:func:`initialize`);
each process then passes only the blocks of its own devices (:func:`to_global`).

Submodules (every public name is re-exported here):

- :mod:`~jaxgcn.distributed.blocks`: row blocks (:class:`GraphBlock`, :func:`partition`,
  :func:`partition_stats`, :func:`shard_nodes`) and the block exchange (:func:`propagate_block`).
- :mod:`~jaxgcn.distributed.runtime`: ``jax.distributed`` setup, the ``nodes`` mesh, global arrays.
- :mod:`~jaxgcn.distributed.sharded`: the sharded model, loss, training runner and :func:`fit_sharded`.
- :mod:`~jaxgcn.distributed.files`: partition files on disk (:func:`save_partitions`, :func:`load_partitions`).
"""

from jaxgcn.distributed.files import (PARTITION_FORMAT, PARTITION_META, load_partitions, read_partition_meta,
                                      save_partitions)
from jaxgcn.distributed.blocks import (AXIS, EXCHANGES, GraphBlock, partition, partition_stats, propagate_block,
                                          shard_nodes, stack_csr)
from jaxgcn.distributed.runtime import initialize, node_mesh, to_global
from jaxgcn.distributed.sharded import (ShardedData, fit_sharded, make_sharded_runner, shard_data, sharded_apply,
                                        sharded_loss, sharded_model)

__all__ = [
    "AXIS", "EXCHANGES", "PARTITION_FORMAT", "PARTITION_META", "GraphBlock", "ShardedData", "fit_sharded",
    "initialize", "load_partitions", "make_sharded_runner", "node_mesh", "partition", "partition_stats",
    "propagate_block", "read_partition_meta", "save_partitions", "shard_data", "shard_nodes", "sharded_apply",
    "sharded_loss", "sharded_model", "stack_csr", "to_global",
]
