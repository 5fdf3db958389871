"""The chaos run's faults on a stack with a standby (`paystream stack up --standby`,
docs/operations.md#a-standby-and-failover): the primary failed over, or the standby
killed, under the run's traffic.

- PRIMARY_FAILOVER: the primary's postmaster that `paystream db status --json` names is
  SIGKILLed with its children and its data directory moved away (a lost disk);
  pg_auto_failover promotes the synchronous standby, the failover follower re-points CDC,
  and the run waits until the ledger applies one of its events again. The old node is
  then rebuilt by its keeper (pg_basebackup from the new primary) as the synchronous
  standby, as tests/cluster/test_standby_failover.py waits for it; the fault ends once
  the stack has its two nodes again.
- STANDBY_KILL: the standby's host gone, its keeper and postmaster SIGKILLed: the monitor
  drops the primary to `wait_primary` (synchronous replication off) and writes go on; the
  run waits until the ledger applies again, then starts the keeper as `stack up` does
  (standby.ensure_keeper) and waits until the node is the synchronous standby again.

Nothing here decides a failover: pg_auto_failover does, the follower moves CDC; this
only kills, moves a folder away, and watches (stack/standby.py's view of the monitor).
Each step is verified, as the run's other faults are: a step that did not happen or did
not end in time raises, and the run counts the fault as not injected (a violation)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paystream.chaos import processes as px
from paystream.launch import paystream_argv
from paystream.stack import standby
from paystream.stack.process import pid_alive, read_pid
from paystream.stack.settings import StackSettings

PRIMARY_FAILOVER, STANDBY_KILL = "primary-failover", "standby-kill"
DB_FAULTS = (PRIMARY_FAILOVER, STANDBY_KILL)
SETTLED_TIMEOUT_S = 180.0      # a primary with its synchronous standby, before a fault
CATCH_UP_TIMEOUT_S = 60.0
PROMOTION_TIMEOUT_S = 120.0
APPLYING_TIMEOUT_S = 120.0
REJOIN_TIMEOUT_S = 300.0       # pg_basebackup of the new primary under the run's load


@dataclass
class DbFault:
    """One database fault, its wall-clock time (time.time()) and what was measured,
    each figure in seconds after the kill."""

    kind: str
    node: str          # the node killed
    port: int
    killed_at: float
    new_primary: str | None = None
    promoted_s: float | None = None       # the monitor names another node writable
    wait_primary_s: float | None = None   # the primary drops synchronous replication
    applying_s: float | None = None       # the ledger commits one of the run's events
    rejoined_s: float | None = None       # two nodes again, primary and sync standby


def db_status() -> dict[str, Any]:
    """What `paystream db status --json` prints (its exit code says only whether it
    found a problem: a missing backup is one)."""
    done = subprocess.run(paystream_argv("db", "status", "--json"), capture_output=True,
                          text=True, timeout=120)
    try:
        status: dict[str, Any] = json.loads(done.stdout)
    except ValueError as exc:
        raise RuntimeError(f"`paystream db status --json` printed no JSON (exit "
                           f"{done.returncode}): {done.stderr[-500:]}") from exc
    return status


def node_in_role(role: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [n for n in db_status()["nodes"] if n["role"] == role]
    if len(found) != 1:
        raise RuntimeError(f"`paystream db status --json` names {len(found)} {role} "
                           "node(s), not one")
    return found[0]


def fail_over(s: StackSettings, caught_up: Callable[[], bool],
              applying_since: Callable[[float], bool]) -> DbFault:
    """PRIMARY_FAILOVER: kill the primary, move its folder away, wait for the promotion
    and the ledger applying again, then for the old node back as the standby.
    `applying_since(t)`: has the ledger committed one of the run's events since t?"""
    cfg = standby.StandbySettings.from_env()
    _before_fault(s, cfg, caught_up)
    primary = node_in_role("primary")
    pid, data = primary["pid"], Path(primary["data_dir"])
    if pid is None or not pid_alive(int(pid)):
        raise RuntimeError(f"{primary['name']}'s postmaster ({pid}) is not running")
    fault = DbFault(PRIMARY_FAILOVER, str(primary["name"]), int(primary["port"]),
                    time.time())
    px.kill_postmaster(int(pid))
    moved = data.with_name(f"{data.name}.lost-{int(fault.killed_at)}")
    os.rename(data, moved)
    try:
        _wait(f"another node promoted after {fault.node}'s kill", PROMOTION_TIMEOUT_S,
              lambda: standby.primary_port(s, cfg) not in (None, fault.port))
        fault.promoted_s = time.time() - fault.killed_at
        _wait("the ledger applying again after the failover", APPLYING_TIMEOUT_S,
              lambda: applying_since(fault.killed_at))
        fault.applying_s = time.time() - fault.killed_at
        new = standby.primary_port(s, cfg)
        fault.new_primary = next((n.name for n in standby.nodes(s) if n.port == new), None)
        _rejoin(s, cfg, fault)
    finally:
        # What a lost disk leaves: nothing anybody reads again.
        shutil.rmtree(moved, ignore_errors=True)
    return fault


def kill_standby(s: StackSettings, caught_up: Callable[[], bool],
                 applying_since: Callable[[float], bool]) -> DbFault:
    """STANDBY_KILL: the standby's keeper and postmaster SIGKILLed (its host gone);
    writes must go on without it; then it is started again and catches up."""
    cfg = standby.StandbySettings.from_env()
    _before_fault(s, cfg, caught_up)
    victim = node_in_role("standby")
    pid = victim["pid"]
    keeper = read_pid(standby.pid_file(s, str(victim["name"])))
    if pid is None or not pid_alive(int(pid)) or keeper is None or not pid_alive(keeper):
        raise RuntimeError(f"{victim['name']} (postmaster {pid}, keeper {keeper}) is not "
                           "running")
    fault = DbFault(STANDBY_KILL, str(victim["name"]), int(victim["port"]), time.time())
    # The keeper first: alone, it restarts its Postgres in a second, before the monitor
    # sees anything.
    kill_tree(keeper)
    px.kill_postmaster(int(pid))
    _wait("the primary in wait_primary (synchronous replication off)",
          PROMOTION_TIMEOUT_S,
          lambda: any(st.reported == "wait_primary" for st in standby.states(s, cfg)))
    fault.wait_primary_s = time.time() - fault.killed_at
    _wait("the ledger applying again without the standby", APPLYING_TIMEOUT_S,
          lambda: applying_since(fault.killed_at))
    fault.applying_s = time.time() - fault.killed_at
    node = next(n for n in standby.nodes(s) if n.name == fault.node)
    standby.ensure_keeper(s, cfg, node)  # as `stack up` starts it
    _rejoin(s, cfg, fault)
    return fault


def _before_fault(s: StackSettings, cfg: standby.StandbySettings,
                  caught_up: Callable[[], bool]) -> None:
    """Two nodes settled (a fault needs a standby to fail over to) and the pipeline
    caught up (the time measured is this fault's, not what an earlier one left)."""
    _wait("a primary with its synchronous standby before the fault", SETTLED_TIMEOUT_S,
          lambda: standby.settled(s, cfg))
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while not caught_up() and time.monotonic() < deadline:
        time.sleep(0.2)


def _rejoin(s: StackSettings, cfg: standby.StandbySettings, fault: DbFault) -> None:
    """The killed node back as the synchronous standby: rebuilt by its keeper (which
    pg_basebackups the new primary into its missing folder), as the failover test
    waits for it; a keeper that is gone is started as `stack up` does."""
    node = next(n for n in standby.nodes(s) if n.name == fault.node)
    keeper = read_pid(standby.pid_file(s, node.name))
    if keeper is None or not pid_alive(keeper):
        standby.ensure_keeper(s, cfg, node)
    _wait(f"{fault.node} back as the synchronous standby", REJOIN_TIMEOUT_S,
          lambda: standby.settled(s, cfg))
    fault.rejoined_s = time.time() - fault.killed_at
    back = node_in_role("standby")
    if back["name"] != fault.node:
        raise RuntimeError(f"{back['name']} is the standby after the fault, not "
                           f"{fault.node}")


def _wait(what: str, timeout: float, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # a database failing over: not yet
            if check():
                return
        time.sleep(0.2)
    raise RuntimeError(f"not seen within {timeout:.0f} s: {what}")


def kill_tree(root: int) -> None:
    """SIGKILL a process and every descendant."""
    tree, grown = {root}, True
    while grown:
        more = {int(p) for p in os.listdir("/proc") if p.isdigit()
                and px.parent_pid(int(p)) in tree}
        grown = not more <= tree
        tree |= more
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait("the killed processes gone", 10, lambda: not any(pid_alive(p) for p in tree))


def describe(fault: DbFault) -> str:
    """The report's line; every figure seconds after the kill."""
    def secs(value: float | None) -> str:
        return "?" if value is None else f"{value:.1f} s"
    if fault.kind == PRIMARY_FAILOVER:
        return (f"database fault: {fault.kind} {fault.node} :{fault.port} killed, folder "
                f"moved away; {fault.new_primary or '?'} promoted after "
                f"{secs(fault.promoted_s)}, kill to ledger applying again "
                f"{secs(fault.applying_s)}, {fault.node} the synchronous standby again "
                f"after {secs(fault.rejoined_s)}")
    return (f"database fault: {fault.kind} {fault.node} :{fault.port} killed; primary in "
            f"wait_primary after {secs(fault.wait_primary_s)}, kill to ledger applying "
            f"again {secs(fault.applying_s)}, {fault.node} the synchronous standby again "
            f"after {secs(fault.rejoined_s)}")
