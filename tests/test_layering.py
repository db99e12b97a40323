"""knowlyr/ is the library: it must never import Prefect, and `import knowlyr` must stay light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "knowlyr"


def _imports(path: Path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.add(node.module.split(".")[0])
    return mods


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_library_never_imports_prefect(path):
    assert "prefect" not in _imports(path), f"{path} imports prefect; only tasks/ and flows/ may"


def test_import_knowlyr_loads_no_heavy_module():
    code = (
        "import sys, knowlyr, knowlyr.cli;"
        "heavy = [m for m in ('torch', 'transformers', 'trl', 'prefect', 'deltalake', 'docker', 'datasets',"
        " 'anthropic', 'openai', 'scipy', 'polars') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import knowlyr pulled in heavy modules: {out.stdout.strip()}"
