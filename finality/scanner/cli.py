"""`paystream chain scan --network N --from B [--to B]`: rescan a range of blocks on
demand (finality/scanner/service.py's ChainScanner.scan_range), as the finality role.

Idempotent: a deposit already recorded (by a webhook or an earlier scan) is left as it
is, so a range may be scanned any number of times. The cursor of `paystream consume
scanner` is not moved. --to defaults to the block the scanner reads up to (the finalized
block, or head - credit depth).
"""

from __future__ import annotations

import argparse
import sys

from paystream.operator_cli import EXIT_CANNOT_RUN, EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chain = sub.add_parser("chain", help="read the chain: rescan blocks for deposits")
    chain_sub = chain.add_subparsers(dest="chain_command", required=True)
    scan = chain_sub.add_parser("scan", help="rescan a range of blocks for deposits into "
                                             "registered addresses (idempotent)")
    scan.add_argument("--network", required=True, help="e.g. ETH_MAINNET")
    scan.add_argument("--from", dest="first", type=int, required=True, metavar="BLOCK",
                      help="first block to scan")
    scan.add_argument("--to", dest="last", type=int, metavar="BLOCK",
                      help="last block to scan (default: the finalized block, or head - "
                           "credit depth)")
    scan.set_defaults(func=_scan)


def _scan(args: argparse.Namespace) -> int:
    import psycopg2

    from paystream.finality.rpc import RpcError
    from paystream.finality.scanner import service as scan_service
    from paystream.finality.scanner import settings as scan_settings

    try:
        settings = scan_settings.from_env([args.network])[0]
    except ValueError as exc:
        print(f"paystream chain scan: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    scanner = scan_service.scanner_for(settings)
    try:
        last = scanner.target() if args.last is None else args.last
        if args.first < 0 or last < args.first:
            print(f"paystream chain scan: nothing to scan from {args.first} to {last}",
                  file=sys.stderr)
            return EXIT_CANNOT_RUN
        written = scanner.scan_range(args.first, last)
    except RpcError as exc:
        print(f"paystream chain scan: the node could not be read: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except psycopg2.OperationalError as exc:
        print(f"paystream chain scan: the database could not be used: {str(exc).strip()}",
              file=sys.stderr)
        return EXIT_CANNOT_RUN
    finally:
        scanner.store.close()
    print(f"{args.network}: scanned blocks {args.first}..{last}: "
          f"{len(written.accepted)} new deposit(s), {len(written.known)} already recorded")
    for event_id in written.accepted:
        print(f"  recorded {event_id}")
    return EXIT_OK
