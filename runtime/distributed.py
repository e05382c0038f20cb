"""Many processes: one JAX process per cluster host, joined by ``jax.distributed.initialize``.

JAX is the distributed engine: every process runs the same program (loads the same plan, calls
the executable with the same host data) and JAX executes each compiled segment on the devices it
owns. Two settings make this work on CPU devices, which is how the tests run two local processes
with 4 or 8 fake devices each:

* ``jax_cpu_collectives_implementation = gloo``: collectives of an SPMD stage that spans processes,
  and the broadcasts that carry values between stages on different processes on CPU (see
  :mod:`planmap.runtime.transfer`: the CPU client's own cross-process transfers hang in JAX 0.10);
* ``jax_cross_host_transfer_socket_address``: JAX's DCN transfer server, for clients without
  native cross-host transfers.

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

    Every process must call it with the same array (it is a collective when ``x`` is not on every
    process's devices): a value spread over processes is all-gathered, one held by a single process
    broadcast from it (:func:`planmap.runtime.transfer.through_host`).
    """
    import jax

    from planmap.runtime.transfer import through_host

    if not isinstance(x, jax.Array) or jax.process_count() == 1:
        return np.asarray(x)
    return through_host(x)  # also where this process holds all of x: the others wait for it
