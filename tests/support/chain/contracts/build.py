"""Regenerate the committed ABI + bytecode of the test contracts with solcjs.

    .venv/bin/python -m tests.support.chain.contracts.build

Installs the npm `solc` package (the Solidity compiler compiled to JavaScript) at the
pinned version into <state_dir>/node-solc, compiles every *.sol beside this file with
fixed settings and writes <Name>.json (abi, bytecode, compiler, settings, source hash).
Tests read the JSON only, so they need neither node nor solc; the build is reproducible
(same compiler, same settings, no metadata hash), so a rebuild gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from paystream.stack.settings import StackSettings

SOLC_VERSION = "0.8.28"  # matches `pragma solidity` in the sources
HERE = Path(__file__).resolve().parent
SETTINGS = {
    "optimizer": {"enabled": True, "runs": 200},
    "evmVersion": "cancun",
    # No IPFS/swarm hash in the bytecode: it would change with any comment edit.
    "metadata": {"bytecodeHash": "none", "appendCBOR": False},
    "outputSelection": {"*": {"*": ["abi", "evm.bytecode.object"]}},
}
# Runs the compiler's JS API on a standard-JSON input read from stdin.
NODE_COMPILE = """
const solc = require(process.argv[1]);
let input = '';
process.stdin.on('data', (c) => { input += c; });
process.stdin.on('end', () => { process.stdout.write(solc.compile(input)); });
"""


def solc_dir() -> Path:
    return StackSettings.from_env().state_dir / "node-solc"


def ensure_solc() -> Path:
    module = solc_dir() / "node_modules" / "solc"
    manifest = module / "package.json"
    if manifest.exists() and json.loads(manifest.read_text())["version"] == SOLC_VERSION:
        return module
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm is missing: install Node.js with npm to rebuild the contracts")
    solc_dir().mkdir(parents=True, exist_ok=True)
    subprocess.run([npm, "install", "--prefix", str(solc_dir()), "--no-audit", "--no-fund",
                    "--loglevel", "error", f"solc@{SOLC_VERSION}"], check=True)
    return module


def compile_all() -> list[Path]:
    module = ensure_solc()
    sources = sorted(HERE.glob("*.sol"))
    request = {"language": "Solidity", "settings": SETTINGS,
               "sources": {p.name: {"content": p.read_text()} for p in sources}}
    done = subprocess.run(["node", "-e", NODE_COMPILE, str(module)],
                          input=json.dumps(request), capture_output=True, text=True,
                          check=True)
    output = json.loads(done.stdout)
    errors = [e for e in output.get("errors", []) if e.get("severity") == "error"]
    if errors:
        sys.exit("\n".join(e["formattedMessage"] for e in errors))
    written = []
    for source in sources:
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        for name, contract in output["contracts"][source.name].items():
            target = HERE / f"{name}.json"
            target.write_text(json.dumps({
                "contractName": name,
                "source": source.name,
                "sourceSha256": digest,
                "compiler": f"solcjs {SOLC_VERSION}",
                "settings": {k: v for k, v in SETTINGS.items() if k != "outputSelection"},
                "abi": contract["abi"],
                "bytecode": "0x" + contract["evm"]["bytecode"]["object"],
            }, indent=1) + "\n")
            written.append(target)
    return written


if __name__ == "__main__":
    for path in compile_all():
        print(f"wrote {path}")
