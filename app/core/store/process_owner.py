"""Which process wrote something into a file that several processes share, and whether that process still runs.

An owner is "pid:start time": a pid alone is reused by the system once its process ends, the pair is not. Stores
that several Hearth processes write at once (the API's stored responses) let each writer look after what it
wrote, and take over what a writer that has ended left behind.
"""

from __future__ import annotations

import os

import psutil


def owner_of(pid: int | None = None) -> str:
    """This process's owner tag (or pid's)."""
    pid = os.getpid() if pid is None else pid
    try:
        started = psutil.Process(pid).create_time()
    except psutil.Error:
        return f"{pid}:?"
    return f"{pid}:{started:.2f}"


def owner_alive(owner: str) -> bool:
    """Whether the process an owner tag names still runs (the same process, not a later one with its pid)."""
    pid, _, _ = owner.partition(":")
    return pid.isdigit() and owner_of(int(pid)) == owner
