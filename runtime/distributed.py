"""Many processes: one JAX process per cluster host, joined by ``jax.distributed.initialize``.

JAX is the distributed engine: every process runs the same program (loads the same plan, calls
the executable with the same host data) and JAX executes each compiled segment on the devices it
owns. Two settings make this work on CPU devices, which is how the tests run two local processes
with 4 fake devices each:

* ``jax_cpu_collectives_implementation = gloo``: collectives of an SPMD stage that spans processes;
* ``jax_cross_host_transfer_socket_address``: the CPU client lacks native cross-host transfers, so
  values sent between pipeline stages on different processes go through JAX's DCN transfer server.

Plan hosts map to processes in :mod:`planmap.runtime.devices`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["initialize", "gather", "shutdown"]


def initialize(coordinator_address: str, num_processes: int, process_id: int, *,
               transfer_address: str | None = None, local_device_ids=None) -> None:
    """``jax.distributed.initialize`` with CPU collectives and cross-process transfers enabled.

    Call before any other JAX call. ``transfer_address``: the socket this process serves stage
    transfers on (default: loopback when the coordinator is local, else all interfaces; port 0 =
    any free port).
    """
    import jax

    host = coordinator_address.rsplit(":", 1)[0]
    if transfer_address is None:
        transfer_address = "127.0.0.1:0" if host in ("127.0.0.1", "localhost") else "0.0.0.0:0"
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_cross_host_transfer_socket_address", transfer_address)
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, local_device_ids=local_device_ids)


def shutdown() -> None:
    import jax

    jax.distributed.shutdown()


def gather(x) -> np.ndarray:
    """The whole value of ``x`` on every process, even on processes that hold none of it.

    Every process must call it with the same array (it is collective when ``x`` spans processes).
    A process without a copy receives one on a mesh of its own devices shaped like ``x``'s, with the
    same PartitionSpec: JAX copies between processes only between identical layouts.
    """
    import jax
    from jax.sharding import AxisType, Mesh, NamedSharding

    from planmap.errors import PlanmapError

    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)
    if not isinstance(x.sharding, NamedSharding):
        raise PlanmapError(f"gather requires a NamedSharding array, but got {type(x.sharding).__name__}")
    mesh = x.sharding.mesh
    holders = {d.process_index for d in mesh.devices.flat}
    if len(holders) > 1:  # spans processes: each holds its part; replicate through a collective
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    n = mesh.devices.size
    mine = x
    for p in range(jax.process_count()):
        if p in holders:
            continue
        local = [d for d in jax.devices() if d.process_index == p]
        if len(local) < n:
            raise PlanmapError(f"cannot copy a value held by {n} devices to process {p}, which has {len(local)}")
        target = Mesh(np.array(local[:n]).reshape(mesh.devices.shape), mesh.axis_names,
                      axis_types=(AxisType.Auto,) * len(mesh.axis_names))
        copy = jax.device_put(x, NamedSharding(target, x.sharding.spec))
        if p == jax.process_index():
            mine = copy
    return np.asarray(mine)
