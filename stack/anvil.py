"""Anvil: a real local Ethereum node for the finality watcher, its tests and benchmarks.

Installed from the npm registry (`@foundry-rs/anvil`, whose platform package ships the
binary) into <state_dir>/node, started detached on loopback with a fixed mnemonic and
chain id, so addresses, keys and the chain id are the same on every machine.

Finality on anvil: the `finalized` tag is `latest - 2 * slots_in_an_epoch` and `safe`
is `latest - slots_in_an_epoch` (1.7.1, measured). Mainnet's 32 slots would make tests
mine 64 blocks per finality; the default here is 2, so a block is final 4 blocks later.

Its variables are declared in paystream/local_chain.py (the finality watcher's default
node is this one); the stack's StackSettings gives the state folder. With persistence on,
the chain is kept in <state_dir>/anvil/state.json across down + up (the ledger keeps tx
hashes).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from paystream.local_chain import DEFAULT_MNEMONIC, AnvilSettings
from paystream.stack import ports
from paystream.stack.process import StackError, read_pid, run, start_detached, stop_pid, wait_until
from paystream.stack.settings import StackSettings

COMPONENT = "anvil"
VERSION = "1.7.1"
PACKAGE = "@foundry-rs/anvil"
_DECLARED = AnvilSettings.model_fields
# One npm install, bounded (a cached install takes seconds, a cold one ~30 s), and tries.
NPM_TRY_TIMEOUT_S = 180.0
NPM_TRIES = 3

# npm's names for this machine's platform package (@foundry-rs/anvil-<os>-<arch>).
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class AnvilConfig:
    """One anvil instance. `name` keys its pid and log files, so a test instance on
    another port never touches the stack's."""

    port: int = _DECLARED["port"].default
    chain_id: int = _DECLARED["chain_id"].default
    block_time: float = _DECLARED["block_time"].default  # 0: automine
    slots_in_an_epoch: int = _DECLARED["slots_in_an_epoch"].default
    mnemonic: str = DEFAULT_MNEMONIC
    persist: bool = _DECLARED["persist"].default
    name: str = "anvil"
    gas_limit: int | None = None  # None: anvil's default (30M); benchmarks raise it

    @classmethod
    def from_env(cls) -> AnvilConfig:
        s = AnvilSettings.from_env()
        return cls(port=s.port, chain_id=s.chain_id, block_time=s.block_time,
                   slots_in_an_epoch=s.slots_in_an_epoch, mnemonic=s.mnemonic,
                   persist=s.persist)

    @property
    def rpc_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def finality_depth(self) -> int:
        """Blocks between `latest` and `finalized` on this instance."""
        return 2 * self.slots_in_an_epoch


def _cfg(cfg: AnvilConfig | None) -> AnvilConfig:
    return cfg if cfg is not None else AnvilConfig.from_env()


def node_dir(s: StackSettings) -> Path:
    return s.state_dir / "node"


def binary(s: StackSettings) -> Path:
    """Where npm puts the platform binary (the JS wrapper only execs it)."""
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    system = platform.system().lower()
    return (node_dir(s) / "node_modules" / "@foundry-rs" / f"anvil-{system}-{arch}"
            / "bin" / "anvil")


def installed_version(s: StackSettings) -> str | None:
    manifest = binary(s).parent.parent / "package.json"
    try:
        return str(json.loads(manifest.read_text()).get("version"))
    except (FileNotFoundError, ValueError):
        return None


def ensure_installed(s: StackSettings) -> bool:
    """Install anvil VERSION from npm when missing or another version; True if it ran now."""
    if installed_version(s) == VERSION and os.access(binary(s), os.X_OK):
        return False
    npm = shutil.which("npm")
    if npm is None:
        raise StackError(COMPONENT, "npm is missing (install Node.js 18+ with npm)")
    node_dir(s).mkdir(parents=True, exist_ok=True)
    # --ignore-scripts: the package's postinstall only re-checks the binary that the
    # platform package (an optional dependency) already ships; scripts stay off.
    # --prefer-offline: what npm's cache holds (every stack after the first on a machine)
    # is taken without asking the registry. A registry that stops answering leaves npm
    # waiting with no end (seen: a second stack's install hung 10 minutes right after the
    # first had installed the same version), so each try is bounded and made again.
    command = [npm, "install", "--prefix", str(node_dir(s)), "--no-audit", "--no-fund",
               "--ignore-scripts", "--prefer-offline", "--loglevel", "error",
               f"{PACKAGE}@{VERSION}"]
    for attempt in range(1, NPM_TRIES + 1):
        try:
            run(command, COMPONENT, timeout=NPM_TRY_TIMEOUT_S)
            break
        except StackError as exc:
            if attempt == NPM_TRIES:
                raise
            print(f"\n  anvil: npm install try {attempt} of {NPM_TRIES} failed ({exc});"
                  " trying again", file=sys.stderr)
    if not os.access(binary(s), os.X_OK):
        raise StackError(COMPONENT, f"npm installed {PACKAGE} but {binary(s)} is missing "
                         f"(no prebuilt binary for {platform.system()} {platform.machine()}?)")
    return True


def pid_file(s: StackSettings, cfg: AnvilConfig | None = None) -> Path:
    return s.run_dir / f"{_cfg(cfg).name}.pid"


def log_file(s: StackSettings, cfg: AnvilConfig | None = None) -> Path:
    return s.logs_dir / f"{_cfg(cfg).name}.log"


def state_file(s: StackSettings, cfg: AnvilConfig | None = None) -> Path:
    return s.state_dir / "anvil" / f"{_cfg(cfg).name}-state.json"


def command(s: StackSettings, cfg: AnvilConfig | None = None) -> list[str]:
    c = _cfg(cfg)
    cmd = [str(binary(s)), "--host", "127.0.0.1", "--port", str(c.port),
           "--chain-id", str(c.chain_id), "--mnemonic", c.mnemonic,
           "--slots-in-an-epoch", str(c.slots_in_an_epoch),
           # Plain text: no colour codes in the log file.
           "--color", "never"]
    if c.gas_limit is not None:
        cmd += ["--gas-limit", str(c.gas_limit)]
    if c.block_time > 0:
        cmd += ["--block-time", f"{c.block_time:g}"]
    if c.persist:
        # Loaded at start, dumped on a clean exit (SIGTERM): the chain survives down + up.
        state_file(s, c).parent.mkdir(parents=True, exist_ok=True)
        cmd += ["--state", str(state_file(s, c))]
    return cmd


def rpc(url: str, method: str, params: list[object] | None = None, timeout: float = 3.0
        ) -> object:
    """One JSON-RPC call (health checks and chain control; the watcher uses web3)."""
    resp = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                 "params": params or []}, timeout=timeout)
    resp.raise_for_status()
    body = resp.json()
    if "error" in body:
        raise RuntimeError(f"{method}: {body['error']}")
    return body.get("result")


def healthy(s: StackSettings, cfg: AnvilConfig | None = None) -> bool:
    """Answering JSON-RPC with the configured chain id (not some other node on the port)."""
    c = _cfg(cfg)
    try:
        return int(str(rpc(c.rpc_url, "eth_chainId")), 16) == c.chain_id
    except (httpx.HTTPError, ValueError, RuntimeError):
        return False


def pid(s: StackSettings, cfg: AnvilConfig | None = None) -> int | None:
    return read_pid(pid_file(s, cfg))


def start(s: StackSettings, cfg: AnvilConfig | None = None) -> bool:
    """Start anvil unless our instance already runs; wait until it answers. True if started."""
    c = _cfg(cfg)
    if read_pid(pid_file(s, c)) is not None:
        return False
    # Another stack's chain node, or anything else: named.
    ports.ensure_free(COMPONENT, c.port, "PAYSTREAM_ANVIL_PORT")
    if not os.access(binary(s), os.X_OK):
        raise StackError(COMPONENT, f"anvil is not installed at {binary(s)} "
                         "(anvil.ensure_installed runs npm)")
    start_detached(command(s, c), pid_file=pid_file(s, c), out_file=log_file(s, c))
    wait_until(COMPONENT, "answering JSON-RPC", lambda: healthy(s, c), timeout=30,
               log=log_file(s, c), pid_file=pid_file(s, c), interval=0.1)
    return True


def stop(s: StackSettings, cfg: AnvilConfig | None = None) -> bool:
    # A clean exit writes the state file; a large chain takes a moment to dump.
    return stop_pid(pid_file(s, cfg), timeout=30)


def version(s: StackSettings) -> str:
    return installed_version(s) or "-"
