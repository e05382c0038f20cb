"""Moving values to where a segment wants them: host data in, and values between stage meshes.

In one process ``jax.device_put`` does everything. With several processes (multi-controller JAX)
it only reshards within one set of devices; copying between two device sets that each span the
processes is refused. Stages of a plan that spans hosts are laid out alike on every host, though:
the i-th device of one stage's mesh and the i-th device of the next stage's mesh sit on the same
host. Such a transfer is done shard by shard — reshard on the source mesh to the target's layout,
copy each local shard to its counterpart device, and assemble the global array — which needs no
cross-process traffic at all.
"""

from __future__ import annotations

import numpy as np

from planmap.errors import PlanmapError

__all__ = ["place"]


def place(x, sharding):
    """``x`` (numpy or jax array) laid out as ``sharding``; works when other processes own some devices."""
    import jax

    if isinstance(x, jax.Array):
        if x.sharding == sharding:
            return x
        if x.is_fully_addressable and sharding.is_fully_addressable:
            return jax.device_put(x, sharding)
        if x.sharding.device_set == sharding.device_set:
            return jax.device_put(x, sharding)
        return _shardwise(x, sharding)
    x = np.asarray(x)
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx], dtype=x.dtype)


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

    try:
        return jax.device_put(x, sharding)
    except ValueError as e:
        raise PlanmapError(
            f"cannot move a value from devices {sorted(d.id for d in x.sharding.device_set)} to "
            f"{sorted(d.id for d in sharding.device_set)} across processes ({str(e).splitlines()[0]}); "
            "lay out consecutive stages alike on every host, or enable JAX's cross-host transfers") from None
