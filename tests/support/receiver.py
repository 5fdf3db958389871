"""The notifier tests' real HTTP receiver: the chaos run's (paystream/chaos/receiver.py),
which checks every signature with the `standardwebhooks` reference library."""

from __future__ import annotations

from paystream.chaos.receiver import Receiver, receiver

__all__ = ["Receiver", "receiver"]
