"""`paystream chaos [--short]`."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from paystream.operator_cli import CannotRunError

SHORT: dict[str, float] = {"rate": 40.0, "duration": 100.0, "users": 40}
LONG: dict[str, float] = {"rate": 200.0, "duration": 600.0, "users": 500}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("chaos", help="prove the invariants while the stack's parts crash")
    p.add_argument("--short", action="store_true",
                   help=f"the test suite's form: {SHORT['rate']:.0f}/s for "
                        f"{SHORT['duration']:.0f} s")
    p.add_argument("--rate", type=float, help="webhooks per second")
    p.add_argument("--duration", type=float, help="seconds of traffic")
    p.add_argument("--users", type=int)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--drain-timeout", type=float, default=300.0)
    p.add_argument("--brokers", type=int, metavar="N",
                   help="the Kafka nodes the stack must have (stack up --brokers N); with "
                        "3 or more a broker and the active controller are killed instead of "
                        "the one broker restarted. Default: the stack's own count")
    p.set_defaults(func=_chaos)


def _chaos(args: argparse.Namespace) -> int:
    # Checked before anything is started: a product install lacks the receiver's library.
    if importlib.util.find_spec("standardwebhooks") is None:
        raise CannotRunError("needs the chaos extra: pip install 'paystream[chaos]'")
    from paystream.chaos.harness import Chaos, ChaosConfig, report

    base = SHORT if args.short else LONG
    cfg = ChaosConfig(rate=args.rate or base["rate"], duration_s=args.duration or base["duration"],
                      users=args.users or int(base["users"]), seed=args.seed,
                      drain_timeout_s=args.drain_timeout, brokers=args.brokers)
    chaos = Chaos(cfg)
    findings, stats = chaos.run()
    print(report(cfg, chaos, findings, stats))
    sys.stdout.flush()
    return 0 if findings.passed else 1
