"""The command lines that prefect.yaml's comments show are ones that work (issue #17: the
example `params='{"episodes": 64}'` was silently ignored)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("prefect")

PREFECT_YAML = Path(__file__).resolve().parents[1] / "prefect.yaml"
EXAMPLE = re.compile(r"prefect deployment run '([^']+)' --param params='([^']+)'")


def _unknown_keys(model: Any, value: dict[str, Any], where: str = "params") -> list[str]:
    """Keys of ``value`` that are no field of the pydantic ``model`` (pydantic drops them)."""
    from pydantic import BaseModel

    out = []
    for key, v in value.items():
        field = model.model_fields.get(key)
        if field is None:
            out.append(f"{where}.{key}")
        elif (
            isinstance(v, dict)
            and isinstance(field.annotation, type)
            and issubclass(field.annotation, BaseModel)
        ):
            out += _unknown_keys(field.annotation, v, f"{where}.{key}")
    return out


def test_every_deployment_run_example_sets_real_parameters() -> None:
    from flows.iterate import IterateParams

    text = PREFECT_YAML.read_text()
    examples = EXAMPLE.findall(text)
    assert examples, "prefect.yaml shows no `prefect deployment run ... --param params=` example"
    deployments = {
        f"{d['entrypoint'].rsplit(':', 1)[1]}/{d['name']}": d
        for d in yaml.safe_load(text)["deployments"]
    }
    for name, raw in examples:
        assert name in deployments, f"the example runs {name!r}, which prefect.yaml does not define"
        params = json.loads(raw)
        assert not _unknown_keys(IterateParams, params), _unknown_keys(IterateParams, params)
        parsed = IterateParams.model_validate(params)
        assert parsed != IterateParams.model_validate(deployments[name]["parameters"]["params"])
        # a run's params replace the deployment's: the nightly seed stays null
        assert parsed.seed == deployments[name]["parameters"]["params"]["seed"]
    assert IterateParams.model_validate(json.loads(examples[0][1])).collect.episodes == 64
