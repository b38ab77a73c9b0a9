"""The real stack for the suite: anvil and payments-api on a fresh PostgreSQL database, started
by tests/node/stack.mjs (through stack_launcher.mjs) exactly as the Node suites start it.

Needs PAYMENTS_API_BIN and TEST_DATABASE_URL, which scripts/clients-test.sh sets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]

# Anvil's well-known dev accounts and the devnet token (tests/node/stack.mjs has the same).
PAYER = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
MERCHANT = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
STRANGER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
DEVNET_USD = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
MERCHANTS = ["demo", "other", "faults", "plain", "pages", "hooks", "errors", "retries", "async"]
BOOTSTRAP = ",".join(f"merchant-{m}=merchant_{m}" for m in MERCHANTS)
UUID_V4 = r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"


def intent_params(i: int, **extra: Any) -> Dict[str, Any]:
    params: Dict[str, Any] = {
        "chain": "evm:31337",
        "token": DEVNET_USD,
        "payer": PAYER,
        "merchant": MERCHANT,
        "amount": str(1000 + i),
        "metadata": {"call": str(i)},
    }
    params.update(extra)
    return params


def until(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Polls ``check`` until it answers something truthy (errors count as not yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception:  # noqa: BLE001 - not yet, whatever it is
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Stack:
    def __init__(self) -> None:
        settings = {
            "BOOTSTRAP_API_KEYS": BOOTSTRAP,
            # The fault run sends far more than 100 requests a second; the limits have a test of their own.
            "MERCHANT_RATE_LIMIT": "0",
            "MERCHANT_CONCURRENCY_LIMIT": "0",
            "WEBHOOK_ALLOW_HTTP": "true",
            "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
        }
        self._process = subprocess.Popen(
            ["node", str(HERE / "stack_launcher.mjs"), json.dumps(settings)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        first = self._read()
        self.chain: str = first["chain"]
        self.base: str = first["base"]

    def _read(self) -> Dict[str, str]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the stack did not start (exit {self._process.wait()}); its error is above")
        return json.loads(line)

    def start_api(self, **env: str) -> str:
        """Another API on the same chain, with these settings over the suite's; its base URL."""
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(env) + "\n")
        self._process.stdin.flush()
        return self._read()["base"]

    def stop(self) -> None:
        if self._process.stdin:
            self._process.stdin.close()
        self._process.wait(timeout=30)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    for name in ("PAYMENTS_API_BIN", "TEST_DATABASE_URL"):
        if not os.environ.get(name):
            pytest.exit(f"{name} is unset: run the suite with scripts/clients-test.sh", returncode=2)
    running = Stack()
    try:
        yield running
    finally:
        running.stop()


def pytest_report_header(config: Any) -> Optional[str]:
    return f"python {sys.version.split()[0]}"
