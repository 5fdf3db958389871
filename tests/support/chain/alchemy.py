"""The Alchemy payload builder the tests use lives in the product (the chaos run needs it
too): paystream/chaos/alchemy.py. Re-exported here for the chain tests."""

from paystream.chaos.alchemy import (  # noqa: F401
    SIGNATURE_HEADER,
    external_activity,
    payload,
    sign,
    signed,
    token_activities,
)
