"""Connecting to a Ray cluster (or starting one on this machine), with Ray's dashboard and usage statistics off.

Ray is an optional dependency (the ``[ray]`` extra): :func:`require_ray` names the extra when it is missing.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional

#: Ray's own switch for its usage statistics, set before Ray starts (nothing is reported from this package)
USAGE_STATS_ENV = "RAY_USAGE_STATS_ENABLED"
#: how long shard actors may take to answer a query before it fails (``RayShardedRetriever(timeout_s=)``,
#: ``pfc serve --ray-timeout``): the one default of every signature that takes it
SHARD_TIMEOUT_S = 30.0


def require_ray() -> Any:
    """The ``ray`` module, or an ImportError (a ``cli_errors.MissingExtra``) that names the extra to install."""
    from ..cli_errors import require_extra

    return require_extra("ray", "ray", "sharded builds and search on a cluster")


def connect(address: Optional[str] = None, *, num_cpus: Optional[int] = None, quiet: bool = True) -> Any:
    """Join the Ray cluster at ``address`` (``"auto"``: the one started on this machine with ``ray start``;
    ``host:port`` of its head), or, with no address and no ``RAY_ADDRESS`` set, start a local one with
    ``num_cpus`` CPUs. A connection already made in this process is kept. Returns the ``ray`` module."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    os.environ.setdefault(USAGE_STATS_ENV, "0")
    options: Dict[str, Any] = {"log_to_driver": not quiet, "logging_level": logging.WARNING if quiet else logging.INFO}
    if address is None and not os.environ.get("RAY_ADDRESS"):
        # "local": always a new cluster of this process's own (no address would join one that `ray start`
        # left running on this machine, and then refuse num_cpus)
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **options)
    else:
        ray.init(address=address, **options)
    return ray


def cluster_gpus() -> int:
    """GPUs the connected cluster has (0 on a CPU-only cluster)."""
    ray = require_ray()
    return int(ray.cluster_resources().get("GPU", 0))
