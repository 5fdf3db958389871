"""No generated password in what the stack and the operator commands print, on a
command line of a stack process, or in the Postgres log (secrets are never shown)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from paystream import credentials
from paystream.launch import paystream_argv
from paystream.schema import db
from paystream.stack import connect, postgres
from paystream.stack.process import read_pid
from paystream.stack.settings import StackSettings


def _passwords() -> list[str]:
    return [credentials.read_secret(db.secret_name(role)) for role in db.ROLE_NAMES]


def _run(*args: str) -> str:
    done = subprocess.run(paystream_argv(*args), capture_output=True, text=True, timeout=300)
    return done.stdout + done.stderr


def test_stack_up_and_the_operator_commands_print_no_password() -> None:
    outputs = {
        "stack up": _run("stack", "up"),  # idempotent on the running stack
        "stack status": _run("stack", "status"),
        "migrate": _run("migrate"),
        "balances": _run("balances", "--user", "nobody-secrets-test"),
        "health": _run("health", "--check", "database", "--check", "replication_slot"),
        "dlq list": _run("dlq", "list", "--limit", "1"),
        "shortfalls": _run("shortfalls", "--user", "nobody-secrets-test"),
        "reconcile": _run("reconcile", "--user", "nobody-secrets-test"),
        "housekeeping": _run("housekeeping", "--dry-run"),
    }
    assert "stack up in" in outputs["stack up"], outputs["stack up"]
    assert "applied:" in outputs["migrate"], outputs["migrate"]
    for password in _passwords():
        for command, text in outputs.items():
            assert password not in text, f"`paystream {command}` printed a password"


def test_no_password_on_a_stack_process_command_line_or_in_the_postgres_log() -> None:
    s = StackSettings.from_env()
    pids = [read_pid(connect.pid_file(s)), postgres.pid(s)]
    cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                for pid in pids if pid]
    assert len(cmdlines) == 2
    log = postgres.log_file(s).read_text(errors="replace")
    for password in _passwords():
        assert all(password not in line for line in cmdlines)
        assert password not in log
