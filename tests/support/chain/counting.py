"""Count what a ChainRpc really sends: wraps its web3 provider's request methods.

`requests` counts JSON-RPC requests by method (a batch counts each request it carries);
`round_trips` counts HTTP POSTs. Nothing is faked: every call still goes to the node.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from paystream.finality.rpc import ChainRpc


class RpcCounter:
    def __init__(self, rpc: ChainRpc) -> None:
        self.requests: Counter[str] = Counter()
        self.round_trips = 0
        provider = rpc.w3.provider
        single, batch = provider.make_request, provider.make_batch_request

        def counted_request(method: Any, params: Any) -> Any:
            self.requests[str(method)] += 1
            self.round_trips += 1
            return single(method, params)

        def counted_batch(calls: list[tuple[Any, Any]]) -> Any:
            for method, _ in calls:
                self.requests[str(method)] += 1
            self.round_trips += 1
            return batch(calls)

        provider.make_request = counted_request  # type: ignore[method-assign]
        provider.make_batch_request = counted_batch  # type: ignore[method-assign]

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def reset(self) -> None:
        self.requests.clear()
        self.round_trips = 0
