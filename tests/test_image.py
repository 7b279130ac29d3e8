"""The Docker image, built the way this machine can: no Docker engine here (nor in CI), so the files the
Dockerfile copies are copied into a folder, installed (``pip install .``, as the Dockerfile does) into a fresh
virtualenv, and the image's commands run from that folder. A package the Dockerfile forgets to copy fails here
as it would fail in the container (``ModuleNotFoundError`` at ``django.setup()``).

The fresh virtualenv takes the project's dependencies from the test environment's site-packages through a
``.pth`` line (pip downloads only the build backend), but not the test environment's editable install of this checkout: a path
added by a ``.pth`` line is searched, its own ``.pth`` files are not run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": "k" * 10 + "9f3Jq!x0Lz@VbN7rT2mW#cY5uH8eD1sA4gK6pQ_Zo-Ri+Xe",
    "DJANGO_ALLOWED_HOSTS": "claimline.example.com",
}


def copied_paths(dockerfile: str) -> list[tuple[str, str]]:
    """The (source, destination) pairs of the Dockerfile's COPY lines."""
    pairs = []
    for line in dockerfile.splitlines():
        words = line.split()
        if words[:1] == ["COPY"]:
            *sources, dest = words[1:]
            pairs += [(src, dest) for src in sources]
    return pairs


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the image's /app, its python)."""
    base = tmp_path_factory.mktemp("image")
    app = base / "app"
    app.mkdir()
    for src, dest in copied_paths((ROOT / "Dockerfile").read_text()):
        target = app / (Path(src).name if dest.endswith("/") or dest == "./" else dest)
        if (ROOT / src).is_dir():
            shutil.copytree(ROOT / src, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / src, target)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    Path(site, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "."],
        cwd=app, capture_output=True, text=True, check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return app, python


def run_in_image(image: tuple[Path, Path], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    app, python = image
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        **PRODUCTION,
        "CLAIMLINE_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'image.sqlite3'}",
    }
    return subprocess.run([str(python), *args], cwd=app, env=env, capture_output=True, text=True, check=False)


def test_the_dockerfile_copies_every_package() -> None:
    copied = {Path(src).name for src, _ in copied_paths((ROOT / "Dockerfile").read_text())}
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in ("tests", "bench")}
    assert packages <= copied, f"the Dockerfile does not copy {sorted(packages - copied)}"


def test_the_image_passes_the_deploy_checks_and_migrates(image: tuple[Path, Path], tmp_path: Path) -> None:
    check = run_in_image(image, tmp_path, "manage.py", "check", "--deploy", "--fail-level", "WARNING")
    assert check.returncode == 0, check.stdout + check.stderr
    migrate = run_in_image(image, tmp_path, "manage.py", "migrate", "--no-input")
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr


def test_the_image_loads_what_its_processes_load(image: tuple[Path, Path], tmp_path: Path) -> None:
    # gunicorn's application, the Celery app with its tasks, and the pipeline's commands.
    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'claimline.settings');"
        "from claimline.wsgi import application; django.setup();"
        "from claimline.celery import app; app.loader.import_default_modules();"
        "assert 'collector.tasks.collect_cluster' in app.tasks and 'derived.tasks.derive_cluster' in app.tasks;"
        "from django.core.management import get_commands;"
        "assert {'collect', 'import-snapshot', 'serve', 'rebuild-derived'} <= set(get_commands())"
    )
    result = run_in_image(image, tmp_path, "-c", code)
    assert result.returncode == 0, result.stdout + result.stderr
