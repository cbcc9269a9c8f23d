"""The container image: the Dockerfile lints clean and its build steps work from the repository alone.

No Docker engine runs on these machines, so the build is exercised as far as it can be: the wheel
the image installs is built from a clean copy and carries the shipped config and workspace template.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from bot.settings import EnvSettings

ROOT = Path(__file__).resolve().parent.parent
# Every variable the settings model reads.
VARIABLES = sorted(name.upper() for name in EnvSettings.model_fields)


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_runs_the_bot_as_a_non_root_user_with_the_workspace_as_a_volume() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile
    assert 'VOLUME ["/data/workspace"]' in dockerfile and "BOT_WORKSPACE=/data/workspace" in dockerfile
    assert 'ENTRYPOINT ["python", "-m", "bot"]' in dockerfile and 'CMD ["run"]' in dockerfile
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    for copied in ["pyproject.toml", "README.md", "config", "workspace_template", "bot"]:
        assert (ROOT / copied).exists(), copied


def test_compose_and_the_env_example_list_every_variable() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    environment = compose["services"]["bot"]["environment"]
    assert sorted(environment) == VARIABLES
    assert environment["BOT_WORKSPACE"] == "/data/workspace"
    assert compose["services"]["bot"]["volumes"] == ["bot-workspace:/data/workspace"]
    example = (ROOT / ".env.example").read_text()
    assert sorted(set(re.findall(r"^#? ?([A-Z_]+)=", example, re.MULTILINE))) == VARIABLES


def test_the_wheel_the_image_installs_carries_the_shipped_files(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "*cache*", "workspace", "tests"))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "bot/_shipped/config/runtime-config.json" in names
    assert "bot/_shipped/config/models.json" in names
    assert "bot/_shipped/config/runtime-config.schema.json" in names
    assert "bot/_shipped/workspace_template/memory/MEMORY.md" in names
    assert "bot/__main__.py" in names
    # The web console's stylesheet and scripts, served from the package (no CDN, no build step).
    assert {"bot/console/static/console.css", "bot/console/static/graph.js"} <= names
