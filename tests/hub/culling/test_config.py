"""The worked example in hub_config/ loads, gives the rules docs/culling.md says, install(c)
lets the service stop servers, and the culler runs only where culling or budget stops are
configured."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpuburst.hub import install
from jupyter_gpuburst.hub.culling import ROLE_NAME, TEMPLATE_VAR
from jupyter_gpuburst.hub.culling.live import wanted
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings

EXAMPLE = Path(__file__).resolve().parents[3] / "hub_config" / "culling_config.py"


def roles_of(c) -> list:
    """The roles JupyterHub loads from ``c``: a list, or additions to whatever else sets it."""
    value = c.JupyterHub.load_roles
    return list(value) if isinstance(value, list | tuple) else value.get_value([])


def load_example() -> Config:
    c = Config()
    exec(EXAMPLE.read_text(), {"get_config": lambda: c})  # noqa: S102 - the admin's own config file
    return c


def test_the_worked_example_gives_the_documented_rules():
    settings = GPUCullingSettings(config=load_example())
    gpu1_kernel = settings.policy("kernel", "gpu-1")
    assert gpu1_kernel.enabled and gpu1_kernel.timeout_s == 1200 and gpu1_kernel.warning_s == 300
    assert settings.policy("server", "gpu-2").timeout_s == 1800
    assert settings.policy("server", "gpu-1").timeout_for("donor") == 1800
    assert settings.policy("server", "gpu-1").timeout_for("origin") == 3600
    assert not settings.policy("server", "cpu").enabled
    assert "instructors" in settings.policy("server", "gpu-1").exempt_groups


def test_install_grants_the_stop_scope_whatever_is_configured_yet():
    # culling and budget settings may follow install(c) in the file, after JupyterHub's roles
    # are fixed: the scope is always there, and only a culler that is configured uses it
    for c in (Config(), load_example()):
        install(c)
        (role,) = [r for r in roles_of(c) if r["name"] == ROLE_NAME]
        assert role["services"] == ["gpuburst"] and role["scopes"] == ["read:users:name", "delete:servers"]
        assert TEMPLATE_VAR in c.JupyterHub.template_vars
        install(c)  # twice changes nothing
        assert [r["name"] for r in roles_of(c)].count(ROLE_NAME) == 1


def test_the_culler_runs_where_culling_or_budget_stops_are_configured():
    assert not wanted(Config())
    assert wanted(load_example())
    budgets = Config()
    budgets.GPUAccountingSettings.user_budgets = {"*": 20.0}
    assert wanted(budgets)
    # warn only: nothing is stopped, so no culler to stop with
    budgets.GPUAccountingSettings.budget_stop = False
    assert not wanted(budgets)


def test_a_wrong_override_stops_the_hub_at_start_with_the_reason():
    c = Config()
    c.GPUCullingSettings.server_profiles = {"gpu-1": {"timeout_minutes": 60}}
    with pytest.raises(TraitError, match="unknown key.*timeout_minutes"):
        install(c)


def test_the_silence_limit_is_on_by_default_can_be_set_per_profile_and_never_negative():
    assert GPUCullingSettings().policy("server", "gpu-1").silent_s == 1800.0  # never kept for ever by default
    c = Config()
    c.GPUCullingSettings.kernel_profiles = {"gpu-1": {"silent_seconds": 0}}
    assert GPUCullingSettings(config=c).policy("kernel", "gpu-1").silent_s == 0.0
    c.GPUCullingSettings.silent_seconds = -1.0
    with pytest.raises(TraitError, match="silent_seconds must be 0 .off. or more, got -1"):
        install(c)
    c = Config()
    c.GPUCullingSettings.server_profiles = {"gpu-1": {"silent_seconds": -5}}
    with pytest.raises(TraitError, match="silent_seconds must be a number of at least 0"):
        install(c)


def test_the_demo_keeps_the_stop_scope_when_culling_is_turned_on_over_it(tmp_path, monkeypatch):
    # an admin trying culling on the demo sets it first and then loads the demo's config; the
    # demo's own roles must not drop the role install(c) gives the gpuburst service
    import importlib.util

    demo_config = importlib.util.find_spec("jupyter_gpuburst.demo_config").origin  # not imported: it is a config file
    for name, value in {
        "GPUBURST_DEMO_PORT": "8000",
        "GPUBURST_DEMO_HUB_PORT": "8081",
        "GPUBURST_DEMO_PROXY_API_PORT": "8001",
        "GPUBURST_DEMO_STATE_DIR": str(tmp_path),
        "GPUBURST_DEMO_PASSWORD": "gpuburst",
        "GPUBURST_DEMO_ADMIN_PASSWORD": "a" * 32,
    }.items():
        monkeypatch.setenv(name, value)
    c = Config()
    c.GPUCullingSettings.enabled = True
    exec(Path(demo_config).read_text(), {"get_config": lambda: c, "__name__": "demo_config"})  # noqa: S102
    (role,) = [r for r in roles_of(c) if r["name"] == ROLE_NAME]
    assert "delete:servers" in role["scopes"]
    assert any(r["name"] == "user" for r in roles_of(c))
