"""The asyncio client is generated from the sync one (`tools/unasync.py`):
this fails when ``async_client.py`` is not what the tool makes of
``client.py`` today, so a method added to one is in both."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_asyncio_client_is_the_sync_one_made_async() -> None:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "tools/unasync.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    package = ROOT / "src/redis_ratelimit"
    made = tool.unasync((package / "client.py").read_text())
    ruff = Path(sys.executable).parent / "ruff"
    formatted = subprocess.run(
        [str(ruff), "format", "--stdin-filename", "async_client.py", "-"],
        input=made,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert formatted == (package / "async_client.py").read_text(), (
        "async_client.py is out of date: run `python tools/unasync.py` in clients/python, "
        "then `ruff format`"
    )
