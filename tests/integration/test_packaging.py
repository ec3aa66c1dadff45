"""The distribution: one import namespace (`modelgate`) whose folder tree is its import path, every module and
data file of its layer folders inside it, and the `modelgate` command and `python -m modelgate` as entry
points."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
LAYER_FOLDERS = ("cabinet", "config", "domain", "infra", "plugins", "proxy", "storage")


def _setuptools() -> dict:
    return tomllib.loads((REPOSITORY / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def _packages_on_disk() -> set[str]:
    packages = {"modelgate"}
    for folder in LAYER_FOLDERS:
        for init in (REPOSITORY / "modelgate" / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPOSITORY)
            packages.add(".".join(relative.parts))
    return packages


def test_every_package_folder_is_listed_for_installation() -> None:
    assert set(_setuptools()["packages"]) == _packages_on_disk()


def test_each_package_lives_at_its_import_path() -> None:
    """No `package-dir` mapping: static tools (type checkers, editors, `python -c`) follow an import only when
    `modelgate.a.b` is the folder modelgate/a/b."""
    assert "package-dir" not in _setuptools()
    for package in _setuptools()["packages"]:
        assert (REPOSITORY.joinpath(*package.split(".")) / "__init__.py").is_file(), package


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel `pip install .` would install, built from a copy of what the checkout ships (setuptools
    writes its build/ folder beside the sources) with the installed setuptools."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPOSITORY / name, source / name)
    shutil.copytree(
        REPOSITORY / "modelgate", source / "modelgate", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = tmp_path_factory.mktemp("wheel")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run(
        [*pip_wheel, "-w", str(out), "."],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("modelgate-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_the_wheel_installs_only_the_modelgate_namespace(wheel: zipfile.ZipFile) -> None:
    top_level = {name.split("/")[0] for name in wheel.namelist()}
    dist_info = {name for name in top_level if name.endswith(".dist-info")}
    assert top_level - dist_info == {"modelgate"}
    assert len(dist_info) == 1


def test_the_wheel_holds_every_module_migration_and_config_file(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    expected = {"modelgate/__init__.py", "modelgate/__main__.py", "modelgate/cli.py"}
    for folder in LAYER_FOLDERS:
        for path in (REPOSITORY / "modelgate" / folder).rglob("*"):
            if path.suffix in (".py", ".sql", ".toml") and "__pycache__" not in path.parts:
                expected.add(path.relative_to(REPOSITORY).as_posix())
    assert expected - names == set()


def test_the_wheel_holds_the_web_cabinet(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    web = REPOSITORY / "modelgate" / "cabinet" / "web"
    shipped = {
        path.relative_to(REPOSITORY).as_posix()
        for path in web.rglob("*")
        if path.is_file() and not path.name.startswith(".")
    }
    assert "modelgate/cabinet/web/index.html" in shipped
    assert any(name.startswith("modelgate/cabinet/web/pages/") for name in shipped)
    assert shipped - names == set()


def test_the_modelgate_command_is_the_cli_main(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[console_scripts]\nmodelgate = modelgate.cli:main" in text


@pytest.fixture(scope="module")
def site_packages(wheel: zipfile.ZipFile, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site-packages of a new virtualenv (no pip, nothing else in it) after `pip install` of the wheel."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    pip_install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index"]
    subprocess.run([*pip_install, "-q", str(wheel.filename)], check=True, capture_output=True, timeout=300)
    (found,) = (venv / "lib").glob("python3*/site-packages")
    return found


def test_installing_puts_only_modelgate_in_site_packages_with_its_py_typed(site_packages: Path) -> None:
    installed = {path.name for path in site_packages.iterdir()}
    assert {name for name in installed if not name.endswith(".dist-info")} == {"modelgate"}
    # PEP 561: the package's own annotations are what a type checker reads in an application using it.
    assert (site_packages / "modelgate" / "py.typed").is_file()


def _pyright_reveals_plugin_on_request(python: Path, folder: Path, cwd: Path) -> str:
    """What pyright (run in `cwd`, with `python`'s site-packages) says `Plugin.on_request` is, from a file
    in `folder` that imports it; its errors fail the test."""
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    assert pyright is not None, "pyright comes with the test extra"
    probe = folder / "probe.py"
    probe.write_text(
        "from modelgate.proxy.pipeline.chain import Plugin\n\nreveal_type(Plugin.on_request)\n",
        encoding="utf-8",
    )
    checked = subprocess.run(
        [pyright, "--outputjson", "--pythonpath", str(python), str(probe)],
        capture_output=True,
        cwd=cwd,
        timeout=600,
    )
    report = json.loads(checked.stdout)
    messages = [d["message"] for d in report["generalDiagnostics"]]
    assert report["summary"]["errorCount"] == 0, messages
    (revealed,) = messages
    return revealed


_ON_REQUEST = "(self: Plugin, ctx: RequestContext) -> (Awaitable[None] | None)"


def test_pyright_reads_the_installed_package_s_own_types(site_packages: Path, tmp_path: Path) -> None:
    """`from modelgate.proxy.pipeline.chain import Plugin` in an application resolves to the installed
    modelgate/proxy/pipeline/chain.py, with its annotations (not an unknown module)."""
    python = site_packages.parents[2] / "bin" / "python"
    assert _ON_REQUEST in _pyright_reveals_plugin_on_request(python, tmp_path, tmp_path)


def test_pyright_in_the_checkout_resolves_the_package_to_its_folders(tmp_path: Path) -> None:
    """In the checkout (the `pip install -e .` of the README, whose import hook no static tool follows),
    pyright resolves `modelgate.proxy.pipeline.chain` to modelgate/proxy/pipeline/chain.py: folder = import
    path, and `[tool.pyright]` in pyproject.toml makes the checkout the project's root."""
    revealed = _pyright_reveals_plugin_on_request(Path(sys.executable), tmp_path, REPOSITORY)
    assert _ON_REQUEST in revealed
