"""The local chain (anvil) the stack runs: its variables, read by the stack manager that
starts it and by the finality watcher, whose default node it is."""

from __future__ import annotations

from pydantic import Field

from paystream.env import EnvSettings, OptOut

# The public test mnemonic every Foundry/Hardhat user knows: its keys guard nothing.
DEFAULT_MNEMONIC = "test test test test test test test test test test test junk"


class AnvilSettings(EnvSettings):
    """Read by the stack manager, which runs anvil; the finality watcher's default node is
    this one."""

    doc_section = "Local chain (anvil)"

    port: int = Field(8545, alias="PAYSTREAM_ANVIL_PORT", ge=1,
                      description="anvil's JSON-RPC port")
    chain_id: int = Field(31337, alias="PAYSTREAM_ANVIL_CHAIN_ID", ge=1,
                          description="chain id")
    block_time: float = Field(0.0, alias="PAYSTREAM_ANVIL_BLOCK_TIME", ge=0, description=(
        "`0`: a block per transaction (automine); N: mine every N seconds"))
    # Mainnet's 32 slots would make tests mine 64 blocks per finality; 2 makes a block
    # final 4 blocks later.
    slots_in_an_epoch: int = Field(2, alias="PAYSTREAM_ANVIL_SLOTS_IN_EPOCH", ge=1,
                                   description="`finalized` is 2 × this many blocks behind "
                                               "the head")
    mnemonic: str = Field(DEFAULT_MNEMONIC, alias="PAYSTREAM_ANVIL_MNEMONIC", repr=False,
                          json_schema_extra={"shown": "anvil's well-known test mnemonic"},
                          description="the accounts' mnemonic (its keys guard nothing)")
    persist: OptOut = Field(True, alias="PAYSTREAM_ANVIL_PERSIST", description=(
        "`1`: keep the chain across `down` + `up`; `0`: a fresh chain"))

    @property
    def rpc_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
