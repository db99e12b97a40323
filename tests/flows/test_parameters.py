"""Deployment parameters: every documented `prefect deployment run` parameter string passes the
deployment's schema (as the server enforces it) and the flow's own models; a wrong one is
refused naming the field; the nightly deployment's defaults are what IterateParams says."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pydantic
import pytest
import yaml
from prefect.utilities.callables import parameter_schema
from prefect.utilities.schema_tools import ValidationError, validate

from flows.iterate import IterateParams

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED = [ROOT / "README.md", ROOT / "deployments" / "README.md", ROOT / "prefect.yaml"]
_RUN = re.compile(r"prefect deployment run '([^']+)'((?:\s+(?:--param|-p)\s+\w+='[^']*')*)")
_PARAM = re.compile(r"(?:--param|-p)\s+(\w+)='([^']*)'")


def _deployments() -> dict[str, tuple[object, dict]]:
    """``{"flow/deployment": (flow, its parameters)}`` from prefect.yaml."""
    config = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    out = {}
    for dep in config["deployments"]:
        path, name = dep["entrypoint"].split(":")
        flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)
        out[f"{flow.name}/{dep['name']}"] = (flow, dep.get("parameters") or {})
    return out


DEPLOYMENTS = _deployments()


def _documented() -> list[tuple[str, str, dict]]:
    runs = []
    for doc in DOCUMENTED:
        for m in _RUN.finditer(doc.read_text()):
            given = {k: json.loads(v) for k, v in _PARAM.findall(m.group(2))}
            runs.append((doc.name, m.group(1), given))
    return runs


def _check(deployment: str, given: dict):
    """What the server and the flow run do with ``given``: the deployment's parameters updated
    by it, validated against the deployment's schema, then by the flow's pydantic models."""
    flow, defaults = DEPLOYMENTS[deployment]
    params = {**defaults, **given}
    validate(params, parameter_schema(flow).model_dump_for_openapi(), raise_on_error=True)
    return flow.validate_parameters(params)


def test_the_docs_show_runs_of_every_kind():
    runs = _documented()
    assert {d for _, d, _ in runs} >= {"iterate/nightly", "iterate/smoke", "collect/ad-hoc"}, runs
    assert any(given for _, _, given in runs)


@pytest.mark.parametrize(("doc", "deployment", "given"), _documented())
def test_documented_parameter_strings_pass_the_deployment_schema(doc, deployment, given):
    assert deployment in DEPLOYMENTS, f"{doc} runs {deployment}, which prefect.yaml lacks"
    validated = _check(deployment, given)
    if deployment == "iterate/nightly":
        # a documented nightly run keeps the date-derived seed
        assert validated["params"].seed is None, (doc, given)


def test_the_nightly_defaults_are_the_parameters_it_runs():
    flow, defaults = DEPLOYMENTS["iterate/nightly"]
    assert defaults["params"] == IterateParams(seed=None).model_dump(mode="json")
    smoke = DEPLOYMENTS["iterate/smoke"][1]["params"]
    assert smoke == IterateParams.small(seed=None, store_url=smoke["store_url"]).model_dump(
        mode="json"
    )
    # the form offers no field the iteration sets itself
    schema = parameter_schema(flow).model_dump_for_openapi()["definitions"]
    iterate_fields = schema["IterateParams"]["properties"]
    collect = schema[iterate_fields["collect"]["$ref"].split("/")[-1]]["properties"]
    export = schema[iterate_fields["export"]["$ref"].split("/")[-1]]["properties"]
    assert not {"seed", "store_url"} & set(collect) and "kind" not in export


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"params": {"episodes": 64}}, "episodes"),  # the old prefect.yaml example
        ({"params": {"seed": None, "collect": {"episode": 64}}}, "episode"),
    ],
)
def test_a_wrong_parameter_string_is_refused_naming_the_key(given, field):
    with pytest.raises(ValidationError, match=f"'{field}' was unexpected"):
        _check("iterate/nightly", given)


def test_a_field_the_iteration_sets_is_refused_with_what_to_set_instead():
    with pytest.raises(Exception, match=r"collect.seed is set by the iteration: set params.seed"):
        IterateParams.model_validate({"collect": {"seed": 3}})
    # a partial stage keeps the loop's own stage defaults (the task mix, the champion)
    p = IterateParams.model_validate({"seed": None, "collect": {"episodes": 256}})
    assert p.collect.episodes == 256 and p.collect.agent == "champion" and len(p.collect.mix) == 13


def test_a_dpo_night_with_one_attempt_per_task_is_refused_naming_the_fix():
    # the nightly default is one attempt per task: DPO pairs attempts at one task
    with pytest.raises(pydantic.ValidationError, match=r"set collect.attempts >= 2"):
        IterateParams.model_validate({"seed": None, "train": {"method": "dpo"}})
    p = IterateParams.model_validate(
        {"seed": None, "collect": {"attempts": 4}, "train": {"method": "dpo"}}
    )
    assert p.collect.attempts == 4 and p.train.method == "dpo" and p.collect.episodes == 800
