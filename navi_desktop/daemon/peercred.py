"""Who is at the other end of a Unix socket. Standard library only: the client checks the
daemon with it before sending a byte, and the daemon checks every client."""

from __future__ import annotations

import logging
import socket
import struct
import sys
from typing import Any

log = logging.getLogger(__name__)


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a connected Unix socket, or None.

    Linux: ``SO_PEERCRED`` (struct ucred: pid, uid, gid). macOS/BSD: ``socket.getpeereid``
    when Python has it, else ``LOCAL_PEERCRED`` (struct xucred: version, uid, ...).
    """
    try:
        so_peercred = getattr(socket, "SO_PEERCRED", None)
        if so_peercred is not None:
            size = struct.calcsize("3i")
            _pid, uid, _gid = struct.unpack(
                "3i", sock.getsockopt(socket.SOL_SOCKET, so_peercred, size)
            )
            return uid
        getpeereid = getattr(socket, "getpeereid", None)
        if getpeereid is not None:
            return int(getpeereid(sock.fileno())[0])
        if sys.platform == "darwin" or "bsd" in sys.platform:
            sol_local = getattr(socket, "SOL_LOCAL", 0)
            local_peercred = getattr(socket, "LOCAL_PEERCRED", 0x001)
            raw = sock.getsockopt(sol_local, local_peercred, 256)
            _version, uid = struct.unpack_from("=IIh", raw)[:2]
            return int(uid)
    except (OSError, struct.error, ValueError) as exc:
        log.warning("cannot read the peer's credentials: %s", exc)
    return None


def user_label(uid: int | None) -> str:
    """``uid 65534 (nobody)`` for messages; the name only where the system knows it."""
    if uid is None:
        return "an unknown user"
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"
