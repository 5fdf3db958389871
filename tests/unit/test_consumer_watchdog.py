"""The consumer's watchdog: a loop that stops beating is ended, with its stacks."""

from __future__ import annotations

import subprocess
import sys

from paystream.consumers.watchdog import EXIT_WEDGED

WEDGED = """
import time
from paystream.consumers.watchdog import Watchdog
dog = Watchdog(0.5, "test-group")
dog.start()
def stuck_commit():
    time.sleep(30)  # stands for a client call that never returns
stuck_commit()
"""

BEATING = """
import time
from paystream.consumers.watchdog import Watchdog
dog = Watchdog(0.5, "test-group")
dog.start()
for _ in range(20):
    dog.beat()
    time.sleep(0.1)
print("finished")
"""


def test_a_loop_that_stops_beating_is_ended_with_a_stack_dump():
    done = subprocess.run([sys.executable, "-c", WEDGED], capture_output=True, text=True,
                          timeout=20)
    assert done.returncode == EXIT_WEDGED
    assert "stuck_commit" in done.stderr  # the stack says where it hung
    assert "consumer_wedged" in done.stdout + done.stderr


def test_a_beating_loop_is_left_alone():
    done = subprocess.run([sys.executable, "-c", BEATING], capture_output=True, text=True,
                          timeout=20)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("finished")
