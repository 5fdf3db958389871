"""Restore throughput: how fast a full backup of the stack's cluster comes back as a
running scratch cluster, in GB of database per minute.

Fills a database of its own (`paystream_bench_restore`, dropped at the end) with
`--mib` MiB of rows (default 1024; random text, so compression does not flatter the
figure), takes a full backup (pgBackRest: lz4, encrypted, as `stack up` configures it),
then restores it into a scratch cluster to the backup's end (`--type=immediate`) and
times the two parts: pgBackRest's restore (files read from the repository, decrypted,
unpacked, written) and the server's start (WAL replayed, promoted). Prints the figure
with the database size the backup says it copied. Run with `make bench-restore` (the
stack must be up). The full backup stays in the repository until the retention expires
it.
"""

from __future__ import annotations

import argparse
import time

from paystream.backups import BackupSettings
from paystream.stack import backup, postgres, scratch
from paystream.stack.settings import StackSettings

DATABASE = "paystream_bench_restore"
ROW_BYTES = 110  # a row of the fill table on disk (tuple header, id, 64 chars, padding)


def fill(s: StackSettings, mib: int) -> float:
    """The bench database with ~`mib` MiB of rows; seconds it took."""
    started = time.monotonic()
    postgres.superuser_sql(s, f'DROP DATABASE IF EXISTS "{DATABASE}"')
    postgres.superuser_sql(s, f'CREATE DATABASE "{DATABASE}"')
    rows = mib * 1024 * 1024 // ROW_BYTES
    postgres.superuser_sql(s, "CREATE TABLE fill (id bigint, body text);"
                              "INSERT INTO fill SELECT g, md5(random()::text) ||"
                              f" md5(random()::text) FROM generate_series(1, {rows}) g;"
                              "CHECKPOINT;", DATABASE)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="database size to add")
    parser.add_argument("--port", type=int, default=5479, help="the scratch cluster's port")
    args = parser.parse_args()
    s, settings = StackSettings.from_env(), BackupSettings.from_env()
    into = s.state_dir / "scratch" / "bench-restore"
    scratch.discard(s, into)
    try:
        fill_s = fill(s, args.mib)
        started = time.monotonic()
        taken = backup.take(settings, "full")
        backup_s = time.monotonic() - started
        restored = scratch.restore(s, settings, into, args.port,
                                   ["--type=immediate", f"--set={taken.label}"])
    finally:
        scratch.discard(s, into)
        postgres.superuser_sql(s, f'DROP DATABASE IF EXISTS "{DATABASE}"')
    gb = taken.size_bytes / 1e9
    total_s = restored.copy_s + restored.recovery_s
    print(f"database {taken.size_bytes / 2**20:.0f} MiB ({gb:.2f} GB; filled in {fill_s:.1f} s),"
          f" in the repository {taken.repo_bytes / 2**20:.0f} MiB (lz4, aes-256-cbc)")
    print(f"full backup {taken.label}: {backup_s:.1f} s = {gb / backup_s * 60:.2f} GB/min")
    print(f"restore: pgbackrest restore {restored.copy_s:.1f} s"
          f" = {gb / restored.copy_s * 60:.2f} GB/min; server start to promoted"
          f" {restored.recovery_s:.1f} s; together {total_s:.1f} s"
          f" = {gb / total_s * 60:.2f} GB/min")


if __name__ == "__main__":
    main()
