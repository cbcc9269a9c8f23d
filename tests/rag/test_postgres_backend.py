"""`rag.backend: postgres`: LightRAG's PostgreSQL storages against a real, throw-away PostgreSQL.

The server is a temporary cluster (`initdb` into the test's folder, a free port on 127.0.0.1, trust
authentication), so the test needs PostgreSQL's server binaries (Debian: `postgresql`) and the
`postgres` extra (asyncpg); it is skipped, saying which is missing, where they are not installed.
Vectors in PostgreSQL need the `vector` extension (Debian: `postgresql-15-pgvector`); where it is not
available the vectors-in-files variant (`rag.postgresVectors: files`) still runs.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.llm.client import LlmClient
from bot.rag.backend import RagQuery
from bot.rag.documents import RagDocument
from bot.rag.embedded import EmbeddedLightRag
from bot.settings import RagConfig
from tests.fakes.openai_server import FakeOpenAI
from tests.rag.helpers import FAST_RAG, lightrag_responder

INITDB = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("asyncpg") is None, reason="the `postgres` extra is not installed"),
    pytest.mark.skipif(not INITDB, reason="PostgreSQL server binaries are not installed (Debian: postgresql)"),
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_postgres(command: list[str]) -> list[str]:
    # initdb refuses to run as root; the Debian package provides the `postgres` user.
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@pytest.fixture(scope="module")
def postgres() -> Iterator[dict[str, str]]:
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser")
    bin_dir = Path(INITDB[-1]).parent
    # Not under pytest's temp folder: that is private to the user running the tests, not to `postgres`.
    folder = Path(tempfile.mkdtemp(prefix="bot-rag-pg-"))
    folder.chmod(0o777)
    data = folder / "data"
    port = _free_port()
    subprocess.run(
        _as_postgres([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    options = f"-p {port} -k {data.parent} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        _as_postgres([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-l", f"{data}.log", "start"]),
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    try:
        yield {
            "POSTGRES_HOST": "127.0.0.1",
            "POSTGRES_PORT": str(port),
            "POSTGRES_USER": "postgres",
            "POSTGRES_PASSWORD": "unused-with-trust",
            "POSTGRES_DATABASE": "postgres",
        }
    finally:
        subprocess.run(
            _as_postgres([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True, timeout=60,
        )  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


def _pgvector_available(bin_dir: Path) -> bool:
    share = subprocess.run([str(bin_dir / "pg_config"), "--sharedir"], capture_output=True, text=True)
    return share.returncode == 0 and Path(share.stdout.strip(), "extension", "vector.control").exists()


@pytest.mark.parametrize("vectors", ["files", "pgvector"])
async def test_documents_live_in_postgresql_per_chat_workspace(
    vectors: str,
    postgres: dict[str, str],
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if vectors == "pgvector" and not _pgvector_available(Path(INITDB[-1]).parent):
        pytest.skip("the pgvector extension is not installed (Debian: postgresql-15-pgvector)")
    for key, value in postgres.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("POSTGRES_WORKSPACE", raising=False)
    fake_openai.set_responder(lightrag_responder)
    llm = LlmClient("sk-test", fake_openai.base_url)
    config = RagConfig.model_validate({**FAST_RAG, "backend": "postgres", "postgresVectors": vectors})
    backend = EmbeddedLightRag(tmp_path / "rag", llm, lambda: config, lambda: "fake-model", "postgres")
    first, second = f"chat_a_{vectors}", f"chat_b_{vectors}"
    try:
        text = "User: my sister Marta lives in Lisbon\nAssistant: Lisbon is lovely."
        await backend.insert(first, [RagDocument("conv_a", "test:a", first, text, "")])
        found = await backend.query(first, RagQuery("where does Marta live", "naive", 10, 5, 1000))
        assert any("Lisbon" in snippet.text for snippet in found)
        graph = await backend.query(first, RagQuery("Marta Lisbon", "local", 10, 5, 1000))
        assert any(snippet.kind == "entity" and snippet.text.startswith("Marta") for snippet in graph)
        assert await backend.query(second, RagQuery("where does Marta live", "naive", 10, 5, 1000)) == []

        await backend.delete(first, ["conv_a"])
        assert not any("Lisbon" in s.text for s in await backend.query(first, RagQuery("Marta", "naive", 10, 5, 1000)))
    finally:
        await backend.close()
        await llm.close()
    assert not (tmp_path / "rag" / first / "kv_store_full_docs.json").exists()  # the documents are in PostgreSQL


async def test_a_shared_postgres_workspace_variable_is_refused(
    postgres: dict[str, str], tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in postgres.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("POSTGRES_WORKSPACE", "everything")
    llm = LlmClient("sk-test", fake_openai.base_url)
    config = RagConfig.model_validate({**FAST_RAG, "backend": "postgres"})
    backend = EmbeddedLightRag(tmp_path / "rag", llm, lambda: config, lambda: "fake-model", "postgres")
    try:
        with pytest.raises(Exception, match="unset POSTGRES_WORKSPACE"):
            await backend.query("global", RagQuery("anything", "naive", 5, 5, 500))
    finally:
        await backend.close()
        await llm.close()
