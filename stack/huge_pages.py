"""Linux huge pages (2 MB) for the stack's Postgres shared memory.

With 4 KB pages every backend maps each page of the buffer pool it touches with a page
fault of its own (its page table, not the pool, is new), ~3-4 us a fault on these VMs:
a fresh ledger backend took ~0.75 faults per event with a 1 GB pool, and every access
to the pool went through 4 KB TLB entries. With the pool in huge pages: ~0.05 faults
per event (measured 2026-12-03, docs/benchmarks.md). Postgres uses huge pages only from
the kernel's reserved pool (vm.nr_hugepages), which is empty by default: `stack up`,
as root, grows it by what the cluster asks (PG 15's shared_memory_size_in_huge_pages)
beyond what is free. Reserved pages are memory the rest of the machine cannot use
until vm.nr_hugepages is lowered again; `huge_pages=try` starts Postgres without them
when they cannot be had (not root, a container, fragmented memory). What a stack
added is noted in its run dir and given back when its Postgres stops.
"""

from __future__ import annotations

from pathlib import Path

MEMINFO = Path("/proc/meminfo")
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


def pool() -> tuple[int, int]:
    """(total, available) pages of the kernel's huge page pool. Available: free and not
    reserved. A running Postgres reserves its pages at start and faults them in as it
    uses them, so until then they count as free (HugePages_Free) and reserved
    (HugePages_Rsvd) at once: a second cluster cannot have them."""
    fields = dict(line.split(":", 1) for line in MEMINFO.read_text().splitlines())
    free = int(fields["HugePages_Free"]) - int(fields.get("HugePages_Rsvd", "0"))
    return int(fields["HugePages_Total"]), free


def reserve(pages: int, added_file: Path) -> str:
    """Make at least `pages` huge pages available (growing the pool by what is missing,
    which `added_file` keeps a count of, for release); what happened, for `stack up`'s
    step line. Never raises: Postgres falls back to normal pages (huge_pages=try)."""
    total, free = pool()
    if free >= pages:
        return f"{pages} pages, free already"
    try:
        NR_HUGEPAGES.write_text(str(total + pages - free))
        total_now, free_now = pool()
        if free_now < pages:  # the kernel found fewer free 2 MB runs than asked: give back
            NR_HUGEPAGES.write_text(str(total))
            return f"only {free_now} of {pages} pages could be had: normal pages"
    except OSError as exc:
        return f"not reserved ({exc.strerror or exc}): normal pages"
    added_file.write_text(str(_added(added_file) + total_now - total))
    return f"{pages} pages reserved (pool {total} -> {total_now})"


def release(added_file: Path) -> int:
    """Give back to the machine the pages `reserve` added for this stack, as far as
    they are available now (its Postgres stopped); how many. Never raises."""
    added = _added(added_file)
    if added <= 0:
        return 0
    try:
        total, free = pool()
        give = min(added, max(free, 0))
        if give:
            NR_HUGEPAGES.write_text(str(total - give))
    except OSError:
        return 0
    if added > give:
        added_file.write_text(str(added - give))
    else:
        added_file.unlink(missing_ok=True)
    return give


def _added(added_file: Path) -> int:
    try:
        return int(added_file.read_text())
    except (OSError, ValueError):
        return 0
