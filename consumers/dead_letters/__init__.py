"""The dead-letter queue, one home (docs/guarantees.md, docs/operations.md#dead-letters):

  send.py     a message that can never succeed, sent to the DLQ topic with its cause
              and kind (the consumer runtime's; it counts against the DLQ limit or not)
  mirror.py   group `dlq-mirror`: the DLQ topic as rows of dead_letter_queue, the stored
              event marked dead_lettered when the contents match
  replay.py   the operator's side: list, show, replay one after its cause is fixed, or
              discard one with its reason (the console's pages and cli.py)
  cli.py      `paystream dlq list | show | replay | discard`
console_routes.py  the console's pages: the list, one in detail, replay, bulk replay,
            discard (replay.py's functions, as the commands); templates/
"""
