"""Connecting to a Ray cluster (or starting one on this machine), with Ray's dashboard and usage statistics off.

Ray is an optional dependency (the ``[ray]`` extra): :func:`require_ray` names the extra when it is missing.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
from typing import Any, Dict, List, Optional

#: Ray's own switch for its usage statistics, set before Ray starts (nothing is reported from this package)
USAGE_STATS_ENV = "RAY_USAGE_STATS_ENABLED"
#: how long shard actors may take to answer a query before it fails (``RayShardedRetriever(timeout_s=)``,
#: ``pfc serve --ray-timeout``): the one default of every signature that takes it
SHARD_TIMEOUT_S = 30.0
#: how long :func:`check_reachable` waits for a cluster's head to accept a connection
REACH_TIMEOUT_S = 5.0


def require_ray() -> Any:
    """The ``ray`` module, or an ImportError (a ``cli_errors.MissingExtra``) that names the extra to install."""
    from ..cli_errors import require_extra

    return require_extra("ray", "ray", "sharded builds and search on a cluster")


def check_reachable(address: Optional[str], timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Refuse, within about ``timeout_s`` seconds, a cluster address whose head does not accept a TCP connection
    (``ray.init`` itself retries for minutes): ``host:port`` or ``ray://host:port``; None, ``""``, ``"auto"`` and
    ``"local"`` are left to Ray. A ValueError for an address that is not one, a ConnectionError otherwise.

    >>> check_reachable("999.1.1.1:6379")
    Traceback (most recent call last):
    ...
    ValueError: Ray address '999.1.1.1:6379': 999.1.1.1 is not an IP address; give the cluster's head as host:port ...
    """
    if not address or address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"Ray address {address!r}: expected the cluster's head as host:port (e.g. 10.0.0.5:6379), "
                         "ray://host:port, or auto")
    if all(part.isdigit() for part in host.split(".")):
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"Ray address {address!r}: {host} is not an IP address; give the cluster's head as "
                             "host:port (e.g. 10.0.0.5:6379)") from None
    outcome: List[OSError] = []

    def attempt() -> None:  # (in a thread: a name lookup cannot be given a timeout)
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
        except OSError as err:
            outcome.append(err)

    worker = threading.Thread(target=attempt, name=f"reach {address}", daemon=True)
    worker.start()
    worker.join(timeout_s + 0.5)
    if worker.is_alive() or outcome:
        err = outcome[0] if outcome else None
        why = (f"no such host ({err.strerror or err})" if isinstance(err, socket.gaierror) else
               f"{err.strerror or err}" if err is not None and not isinstance(err, socket.timeout) else
               f"no answer within {timeout_s:g} s")
        raise ConnectionError(f"cannot reach the Ray cluster at {address}: {why}; check the address, that "
                              "`ray start --head` runs there and that its port is open")


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
        check_reachable(address or os.environ.get("RAY_ADDRESS"))
        ray.init(address=address, **options)
    return ray


def cluster_gpus() -> int:
    """GPUs the connected cluster has (0 on a CPU-only cluster)."""
    ray = require_ray()
    return int(ray.cluster_resources().get("GPU", 0))
