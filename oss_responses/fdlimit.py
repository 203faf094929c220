"""Open files: each serving process raises its soft limit toward its hard limit when it starts.

Every SSE client is a socket, and so is every pooled Redis connection. Services often start with a
soft limit of 1,024 (systemd's default, with a hard limit of 524,288). An API process started with a
soft limit of 128 failed 178 of 200 concurrent streams, some with a 500 ("Too many open files"),
though its hard limit allowed far more; at 1,024 that happens past about a thousand clients. As
vLLM's own API server does, the API and each worker raise the soft limit at start, up to ``WANTED``;
the hard limit stays the operator's (``LimitNOFILE=``, ``docker run --ulimit nofile=``).
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

WANTED = 65_536


def raise_open_files_limit(process: str) -> int:
    """Raise ``RLIMIT_NOFILE``'s soft limit to ``WANTED`` (or the hard limit, if lower); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = WANTED if hard == resource.RLIM_INFINITY else min(WANTED, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        log.info("%s: open files limit raised from %d to %d (hard limit %s)", process, soft, target,
                 "unlimited" if hard == resource.RLIM_INFINITY else hard)
        return target
    return soft
