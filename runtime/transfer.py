"""Moving values to where a segment wants them: host data in, and values between stage meshes.

In one process ``jax.device_put`` does everything. With several processes (multi-controller JAX)
it only reshards within one set of devices; copying between two device sets that each span the
processes is refused. Stages of a plan that spans hosts are laid out alike on every host, though:
the i-th device of one stage's mesh and the i-th device of the next stage's mesh sit on the same
host. Such a transfer is done shard by shard — reshard on the source mesh to the target's layout,
copy each local shard to its counterpart device, and assemble the global array — which needs no
cross-process traffic at all.

Stages on different hosts (one stage per host, the whole-cluster plans' usual shape) need real
cross-process copies. Accelerator clients do them natively: the value is first resharded on its
own devices to the target's layout (JAX copies across processes only between identical layouts)
and then sent. The CPU client's transfers (``jax_cross_host_transfer_socket_address``) hang in
this JAX (0.10: the receiving side of a ``device_put`` never completes, even for one device per
process), so on CPU the value goes through host memory instead: the process that holds it
broadcasts it to every process with a collective (gloo), and each process places its part.
Every process must make the same transfers in the same order — which it does, running the same
program.
"""

from __future__ import annotations

import numpy as np

from planmap.errors import PlanmapError

__all__ = ["place", "through_host"]


def place(x, sharding):
    """``x`` (numpy or jax array) laid out as ``sharding``; works when other processes own some devices."""
    import jax

    if isinstance(x, jax.Array):
        if x.sharding == sharding:
            return x
        if _elsewhere(x.sharding) and _elsewhere(sharding):  # another process's business: a placeholder here
            return jax.make_array_from_callback(x.shape, sharding, lambda idx: None, dtype=x.dtype)
        if x.is_fully_addressable and sharding.is_fully_addressable:
            return jax.device_put(x, sharding)
        if x.sharding.device_set == sharding.device_set:
            return jax.device_put(x, sharding)
        return _shardwise(x, sharding)
    x = np.asarray(x)
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx], dtype=x.dtype)


def _elsewhere(sharding) -> bool:
    """No device of ``sharding`` belongs to this process."""
    import jax

    me = jax.process_index()
    return all(d.process_index != me for d in sharding.device_set)


def _shardwise(x, sharding):
    """Copy between device sets that span processes, one local shard at a time (see the module docstring)."""
    import jax
    from jax.sharding import AxisType, Mesh, NamedSharding

    src, dst = x.sharding, sharding
    if not (isinstance(src, NamedSharding) and isinstance(dst, NamedSharding)) or src.mesh.size != dst.mesh.size:
        return _cross_process(x, sharding)
    src_devices = src.mesh.devices.reshape(dst.mesh.devices.shape)
    pairs = dict(zip(src_devices.flat, dst.mesh.devices.flat, strict=True))
    if any(a.process_index != b.process_index for a, b in pairs.items()):
        return _cross_process(x, sharding)
    names = dst.mesh.axis_names
    aligned = NamedSharding(Mesh(src_devices, names, axis_types=(AxisType.Auto,) * len(names)), dst.spec)
    y = jax.device_put(x, aligned)  # same device set: a reshard JAX does across processes
    shards = sorted(y.addressable_shards, key=lambda s: s.device.id)
    moved = [jax.device_put(s.data, pairs[s.device]) for s in shards]
    order = {d: i for i, d in enumerate(dst.addressable_devices_indices_map(x.shape))}
    moved.sort(key=lambda a: order[next(iter(a.devices()))])
    return jax.make_array_from_single_device_arrays(x.shape, dst, moved)


def _cross_process(x, sharding):
    import jax
    from jax.sharding import AxisType, Mesh, NamedSharding

    src = x.sharding
    if next(iter(sharding.device_set)).platform == "cpu":
        return place(through_host(x), sharding)
    if isinstance(src, NamedSharding) and isinstance(sharding, NamedSharding) and src.mesh.size == sharding.mesh.size:
        names = sharding.mesh.axis_names
        aligned = Mesh(src.mesh.devices.reshape(sharding.mesh.devices.shape), names,
                       axis_types=(AxisType.Auto,) * len(names))
        x = jax.device_put(x, NamedSharding(aligned, sharding.spec))  # same layout on both sides
    try:
        return jax.device_put(x, sharding)
    except ValueError as e:
        raise PlanmapError(
            f"cannot move a value from devices {sorted(d.id for d in x.sharding.device_set)} to "
            f"{sorted(d.id for d in sharding.device_set)} across processes ({str(e).splitlines()[0]}); "
            "lay out consecutive stages alike on every host, or enable JAX's cross-host transfers") from None


def through_host(x) -> np.ndarray:
    """The whole value of ``x`` as a numpy array on every process (collective: every process calls it).

    A value on one process is broadcast from it; one spread over several is all-gathered."""
    import jax
    from jax.experimental import multihost_utils

    if x.is_fully_addressable and jax.process_count() == 1:
        return np.asarray(x)
    holders = sorted({d.process_index for d in x.sharding.device_set})
    if len(holders) > 1:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    mine = jax.process_index() == holders[0]
    dtype = np.dtype(x.dtype)
    wire = np.uint8 if dtype == np.bool_ else dtype  # psum of zeros from the others: exact for numbers
    value = np.asarray(x).astype(wire) if mine else np.zeros(x.shape, wire)
    return np.asarray(multihost_utils.broadcast_one_to_all(value, is_source=mine)).astype(dtype)
