"""Every name a scenario may choose (sim/vocab.py) has a code in the core, and the core's
dispatch has a branch for that code; the schema accepts exactly those names."""

from __future__ import annotations

import ast
import inspect
from typing import get_args

import pytest

from sim.core import policies, router, state
from sim.results.describe import POLICY_NAMES, ROLE_NAMES
from sim.scenario.schema import ReplicaSpec, Router, Scheduler
from sim.vocab import POLICIES, ROLES, ROUTERS, Policy, Role, RouterPolicy, constant

VOCABULARIES = {"policy": (Policy, POLICIES), "router": (RouterPolicy, ROUTERS), "role": (Role, ROLES)}


def branches(fn, variable: str) -> set[str]:
    """The constants ``variable`` is compared with (==) in ``fn``'s branches."""
    tree = ast.parse(inspect.getsource(inspect.unwrap(getattr(fn, "py_func", fn))))
    return {node.comparators[0].id for node in ast.walk(tree)
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == variable
            and isinstance(node.ops[0], ast.Eq) and isinstance(node.comparators[0], ast.Name)}


@pytest.mark.parametrize("vocabulary", VOCABULARIES)
def test_every_name_has_its_own_code_and_constant(vocabulary):
    names, codes = VOCABULARIES[vocabulary]
    assert list(codes) == list(get_args(names))
    assert sorted(codes.values()) == list(range(len(codes)))
    for name, code in codes.items():
        assert getattr(state, constant(name)) == code, name


def test_every_policy_and_router_has_a_branch_in_the_core():
    assert branches(policies.schedule, "policy") == {constant(n) for n in POLICIES}
    assert branches(router.route, "kind") == {constant(n) for n in ROUTERS}


def test_the_schema_and_the_report_use_the_same_names():
    assert Scheduler.model_fields["policy"].annotation == Policy
    assert Router.model_fields["policy"].annotation == RouterPolicy
    assert ReplicaSpec.__annotations__["role"] in (Role, "Role")
    assert POLICY_NAMES.keys() == POLICIES.keys()
    assert ROLE_NAMES.keys() == ROLES.keys()


def test_a_name_outside_the_vocabulary_is_refused_by_name():
    from sim.errors import InputError
    from sim.scenario.load import load_scenario

    with pytest.raises(InputError, match=r"scheduler\.policy"):
        load_scenario(None, ["scheduler.policy=greedy"])
