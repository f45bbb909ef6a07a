"""Who may use a door, one policy for every door that can tell: a Unix
socket's peer is known by its credentials (SO_PEERCRED), read from the
kernel, never from anything the peer says, and let in by the daemon's
allow_users / allow_groups (`Access`). The socket API and Wyoming's Unix
listener both check it here."""

from __future__ import annotations

import errno
import socket
import struct
from dataclasses import dataclass

SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux 4.13+
MAX_PEER_GROUPS = 256


@dataclass(frozen=True, slots=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"uid={self.uid} gid={self.gid} pid={self.pid}"


@dataclass(frozen=True, slots=True)
class Access:
    """Who may talk to the daemon beyond root and the daemon's own user. Both
    lists empty: whoever the socket's file mode lets connect."""
    allow_users: tuple[int, ...] = ()
    allow_groups: tuple[int, ...] = ()

    def allows(self, peer: Peer, own_uid: int) -> bool:
        if not self.allow_users and not self.allow_groups:
            return True
        if peer.uid in (0, own_uid) or peer.uid in self.allow_users:
            return True
        return any(g in self.allow_groups for g in (peer.gid, *peer.groups))


def peer_of(sock) -> Peer:
    """The connecting process, from the kernel (SO_PEERCRED), not from anything it says."""
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                        struct.calcsize("3i")))
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 4 * MAX_PEER_GROUPS)
        groups = struct.unpack(f"{len(raw) // 4}I", raw)
    except OSError as exc:  # an older kernel, or more groups than we ask for
        if exc.errno not in (errno.ENOPROTOOPT, errno.ERANGE):
            raise
        groups = ()
    return Peer(pid, uid, gid, tuple(groups))
