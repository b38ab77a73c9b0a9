"""The README's "Use it from code" Python, run as written against the suite's server (its address
put where the README says localhost), with the package as installed, after a ``wallet`` that asks
anvil to sign (the README leaves the payer's wallet to the reader)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading

from payments_api import PaymentsApi

from .conftest import ROOT, until


def readme_python() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Use it from code")
    section = readme[start : readme.index("\n## ", start + 5)]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, 'a ```python block under "## Use it from code"'
    return block.group(1)


# The payer's wallet, which the README leaves to the reader: anvil, which holds the payer's key.
WALLET = """import httpx as _httpx


class _Wallet:
    def sign_typed_data(self, address, typed_data):
        request = {{"jsonrpc": "2.0", "id": 1, "method": "eth_signTypedData_v4", "params": [address, typed_data]}}
        return _httpx.post({chain!r}, json=request).json()["result"]


wallet = _Wallet()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_readme_python_runs_as_written(stack, tmp_path):
    source = readme_python().replace("http://localhost:8080", stack.base).replace("9001", str(free_port()))
    script = tmp_path / "readme.py"
    script.write_text(WALLET.format(chain=stack.chain) + source)
    # -u: each line as printed (the snippet's stdout is a pipe here).
    child = subprocess.Popen([sys.executable, "-u", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list = []
    errors: list = []
    threading.Thread(target=lambda: lines.extend(child.stdout), daemon=True).start()
    threading.Thread(target=lambda: errors.extend(child.stderr), daemon=True).start()
    try:
        def paid():
            assert child.poll() is None, "".join(errors)
            return next((m for m in map(re.compile(r"^payment_intent\.succeeded (pi_[0-9a-f]{24})$").match, lines) if m), None)

        intent_id = until("the snippet's intent to be paid", paid, timeout=60).group(1)
        # Deliveries are at least once and in no promised order: each event is awaited, not assumed.
        until(
            "the snippet to print each of the intent's events",
            lambda: all(f"payment_intent.{kind} {intent_id}\n" in lines for kind in ("created", "processing")),
            timeout=60,
        )
        demo = PaymentsApi(api_key="merchant-demo", base_url=stack.base)
        assert demo.payment_intents.retrieve(intent_id).state == "succeeded"
    finally:
        child.terminate()
        child.wait(timeout=10)
