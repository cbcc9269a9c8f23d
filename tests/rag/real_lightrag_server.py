"""The real LightRAG server (`lightrag-server` of lightrag-hku) as a child process on 127.0.0.1, for the tests.

`RealLightRagServer(model_url, api_key, folder).start()` runs it with its working directory in `folder`, its
LLM and embedding bindings `openai` pointed at a fake OpenAI server (`tests.fakes.openai_server`), JSON and
NetworkX storages, and `X-API-Key` required; it returns once `GET /health` answers. `stop()` sends SIGINT,
as Ctrl-C would, and waits for the server to shut down.

The process is `tests.rag.lightrag_server_offline`: `lightrag-server` with nothing downloaded (its tokenizer
given, see there); everything else is the server as `lightrag-server` runs it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

from tests.channels.telegram_harness import free_port
from tests.fakes.openai_server import DEFAULT_EMBEDDING_DIMENSIONS

START_SECONDS = 30.0
STOP_SECONDS = 10.0


class RealLightRagServer:
    """`lightrag-server` in a child process; see the module docstring."""

    def __init__(self, model_url: str, api_key: str, folder: Path) -> None:
        self.model_url = model_url
        self.api_key = api_key
        self.folder = folder
        self.port = 0
        self.log = folder / "server.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("lightrag-server is not running")
        return self._process.pid

    def start(self) -> Self:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.folder),
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "WORKING_DIR": str(self.folder / "rag_storage"),
            "INPUT_DIR": str(self.folder / "inputs"),
            "LIGHTRAG_API_KEY": self.api_key,
            "LLM_BINDING": "openai",
            "LLM_BINDING_HOST": self.model_url,
            "LLM_BINDING_API_KEY": "fake-key",
            "LLM_MODEL": "fake-model",
            "EMBEDDING_BINDING": "openai",
            "EMBEDDING_BINDING_HOST": self.model_url,
            "EMBEDDING_BINDING_API_KEY": "fake-key",
            "EMBEDDING_MODEL": "fake-embedding",
            "EMBEDDING_DIM": str(DEFAULT_EMBEDDING_DIMENSIONS),
            # The fake's hash vectors are too noisy for LightRAG's similarity threshold.
            "COSINE_THRESHOLD": "-1",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        }
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tests.rag.lightrag_server_offline"],
                cwd=self.folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_SECONDS
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"lightrag-server exited with {self._process.returncode}: {self._tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"lightrag-server did not answer /health within {START_SECONDS:g} s: {self._tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise RuntimeError(f"lightrag-server did not stop within {STOP_SECONDS:g} s of SIGINT") from None

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
