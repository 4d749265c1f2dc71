"""The mesh a kernel with remote copies is traced under (inside `jax.shard_map`).

Device ids in remote copies and barriers are flat ranks, row-major over the
mesh's axes (`pl.DeviceIdType.LOGICAL`); these helpers give the generated code
the mesh's device count and this device's own rank in that numbering, when the
kernel is traced.
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax


def mesh_axes() -> tuple:
    """The axes the kernel runs over: the `jax.shard_map`'s manual axes (JAX's abstract
    mesh), else the names in JAX's axis environment (the axes the interpreter numbers
    devices by)."""
    from jax._src import core as jax_core

    mesh = jax.sharding.get_abstract_mesh()
    if not mesh.empty and mesh.manual_axes:
        return tuple(mesh.manual_axes)
    return tuple(jax_core.get_axis_env().axis_sizes)


def mesh_devices() -> int:
    """The device count of the mesh the kernel is being traced under."""
    from jax._src import core as jax_core

    mesh = jax.sharding.get_abstract_mesh()
    sizes = jax_core.get_axis_env().axis_sizes
    return int(np.prod([mesh.shape[a] if a in mesh.shape else sizes[a] for a in mesh_axes()], dtype=np.int64))


def mesh_rank():
    """This device's flat rank on that mesh (row-major over its axes): a traced int32."""
    return lax.axis_index(mesh_axes())


__all__ = ["mesh_axes", "mesh_devices", "mesh_rank"]
