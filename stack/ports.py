"""Who listens on a TCP port, so that `stack up` can name the process in its way.

Without this, a port another stack still holds (a test stack `make test` left running
in a clone since deleted) failed deep in the component's own log ("pgbouncer: cannot
listen on 127.0.0.1:6434"). Read from /proc (Linux): the listening sockets in
/proc/net/tcp and tcp6, then the process whose file descriptors hold that socket.
"""

from __future__ import annotations

import os
from pathlib import Path

from paystream.stack.process import StackError

_LISTEN = "0A"  # the kernel's TCP_LISTEN state, as /proc/net/tcp writes it


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[int]:
    """The inodes of the sockets listening on `port`, any address, IPv4 or IPv6."""
    found: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(fields[9]))
    return found


def holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """"pid N: its command line" of a process listening on `port`; None if nothing
    listens. A socket whose owner this user cannot see is named as such."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        if _links(entry / "fd") & wanted:
            return f"pid {entry.name}: {_command(entry)}"
    return "a process this user cannot see"


def _links(fd_dir: Path) -> set[str]:
    """What the process's file descriptors point to ("socket:[inode]" for a socket)."""
    found: set[str] = set()
    try:
        fds = list(fd_dir.iterdir())
    except OSError:  # exited, or not ours to read
        return found
    for fd in fds:
        try:
            found.add(os.readlink(fd))
        except OSError:  # closed meanwhile (the listing's own descriptor, for one)
            continue
    return found


def _command(entry: Path) -> str:
    try:
        argv = (entry / "cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ")
    except OSError:
        return "?"
    text = argv.decode(errors="replace")
    return text if len(text) <= 300 else text[:300] + " ..."


def ensure_free(component: str, port: int, setting: str) -> None:
    """Raise StackError naming the listener on `port`, before `component` starts on it.
    `setting`: the variable that moves the component to another port."""
    found = holder(port)
    if found is not None:
        raise StackError(component, (
            f"port {port} is taken by {found}\n"
            "Another stack (or anything else) listens there. Stop it (a stack: "
            "`PAYSTREAM_STATE_DIR=<its state dir> paystream stack down`, with its ports) "
            f"or start this one elsewhere ({setting})."))
