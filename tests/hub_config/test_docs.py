"""The README and docs/: the two commands first, a short README that links every page, and a
configuration reference that matches the traits.

Longer than 600 lines: 30 short tests of the same pages, sharing how they read them."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets import Float, HasTraits, Int

from jupyter_gpuburst import docs_traits

REPO = Path(__file__).resolve().parents[2]


def test_readme_starts_with_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert lines[0] == "# jupyter-gpuburst"
    block = lines[lines.index("```bash") + 1 : lines.index("```")]
    assert [line.split("#")[0].strip() for line in block] == ["make demo", "make test"]
    assert lines.index("```bash") < 4


def test_readme_is_short_and_links_every_docs_page():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    index = text[text.index("<!-- docs/index") :]
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in index, f"README's docs index does not link docs/{page.name}"
    # the configuration reference lives in one place
    assert docs_traits.BEGIN not in text


def test_docs_links_point_at_files_that_exist():
    import re

    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links {target}, which does not exist"


def test_config_reference_is_current():
    assert docs_traits.main(["--check", str(REPO / "docs" / "configuration.md")]) == 0


def test_reference_lists_every_placement_trait_once():
    text = docs_traits.render()
    for name in ("strategy", "donor_order", "group_donor_caps", "queue_when_full", "max_redirects"):
        assert text.count(f"| `c.GPUBurstSpawner.{name}` |") == 1
    # KubeSpawner's own options are documented upstream, not repeated here
    assert "c.GPUBurstSpawner.image`" not in text and "profile_list" not in text


def test_check_detects_a_stale_reference(tmp_path):
    stale = tmp_path / "README.md"
    stale.write_text(f"# x\n{docs_traits.BEGIN}\nold\n{docs_traits.END}\n")
    assert docs_traits.main(["--check", str(stale)]) == 1
    assert docs_traits.main(["--write", str(stale)]) == 0
    assert docs_traits.main(["--check", str(stale)]) == 0
    assert "| `c.GPUBurstSpawner.strategy` |" in stale.read_text()


def test_missing_markers_and_missing_help_are_errors():
    with pytest.raises(ValueError, match="markers not found"):
        docs_traits.splice("no markers here", "x")

    class Thing(HasTraits):
        documented = Int(1, config=True, help="Counted things.")
        undocumented = Float(config=True)

    Thing.__module__ = "jupyter_gpuburst.example"
    with pytest.raises(ValueError, match="undocumented"):
        docs_traits.render([("Thing", "an example", Thing)])


def test_a_default_decided_at_run_time_is_shown_as_dynamic():
    """A @default method's value depends on the environment: the bare trait's 0 would mislead."""
    from traitlets import default

    class Thing(HasTraits):
        fixed = Int(3, config=True, help="A fixed default.")
        from_env = Int(config=True, help="From $THING_COUNT, else 1.")

        @default("from_env")
        def _from_env_default(self) -> int:
            return 1

    Thing.__module__ = "jupyter_gpuburst.example"
    text = docs_traits.render([("Thing", "an example", Thing)])
    assert "| `c.Thing.fixed` | Int | `3` |" in text
    assert "| `c.Thing.from_env` | Int | `(dynamic)` |" in text


def test_the_reasons_the_readme_quotes_are_the_ones_placement_gives():
    from jupyter_gpuburst.bench import synthetic
    from jupyter_gpuburst.core.inventory import Inventory
    from jupyter_gpuburst.core.placement import GPURequest, NoCapacity, Placement, Policy, decide

    gpu = "nvidia.com/gpu"

    def snapshot(donor_busy: int):
        inv = Inventory()
        inv.apply_node_event("ADDED", synthetic.node("gpu-0", {gpu: 2}))
        inv.apply_node_event("ADDED", synthetic.node("liqo-donor-1", {gpu: 8}, cluster_id="donor-1"))
        inv.apply_pod_event("ADDED", synthetic.pod("busy", node_name="gpu-0", gpus={gpu: 2}))
        inv.apply_pod_event("ADDED", synthetic.pod("away", node_name="liqo-donor-1", gpus={gpu: donor_busy}))
        return inv.snapshot()

    readme = " ".join(((REPO / "README.md").read_text() + (REPO / "docs" / "faq.md").read_text()).split())
    placed = decide(GPURequest(gpu, 2, "ann"), snapshot(donor_busy=2), Policy())
    assert isinstance(placed, Placement) and f'("{placed.reason}")' in readme
    full = decide(GPURequest(gpu, 2, "ann"), snapshot(donor_busy=7), Policy())
    assert isinstance(full, NoCapacity) and f'("{full.reason}")' in readme


def test_one_release_number_everywhere():
    """The version comes from labextension/package.json. A release has a dated changelog section
    and images, configs and guide use its tag; between releases the version is the next one's
    development version (npm's 0.3.0-dev.0), whose section says it is unreleased, and they use the
    last release's tag (the images an admin can pull)."""
    import json
    import re

    from packaging.version import Version

    version = Version(json.loads((REPO / "labextension" / "package.json").read_text())["version"])
    changelog = (REPO / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    if version.is_devrelease:
        assert re.search(rf"^## \[{re.escape(version.base_version)}\] - Unreleased$", changelog, re.M)
        assert version.base_version not in released and Version(released[0]) < version
    else:
        assert not version.is_prerelease and not version.local, f"{version}: a release or a .dev0 of the next one"
        assert released[0] == str(version)
    release = released[0]
    files = [
        "hub_config/values.yaml",
        "hub_config/jupyterhub_config.py",
        "hub_config/images/hub.Dockerfile",
        "hub_config/images/singleuser.Dockerfile",
        "docs/install.md",
    ]
    for name in files:
        text = (REPO / name).read_text()
        tags = set(re.findall(r"jupyter-gpuburst/(?:hub|singleuser)(?::|\"\n\s+tag: \")(\d+\.\d+\.\d+)", text))
        tags |= set(re.findall(r"tag: \"(\d+\.\d+\.\d+)\"", text))
        tags |= set(re.findall(r"jupyter_gpuburst-(\d+\.\d+\.\d+)-py3", text))
        assert tags == {release}, f"{name} uses {tags}, not {release}"


def test_the_kernel_defaults_and_messages_the_docs_quote_are_the_codes():
    from traitlets.config import Config

    from jupyter_gpuburst.hub.kernels.resources import DEFAULT_REQUESTS
    from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, profile_notes
    from jupyter_gpuburst.server.kernels.provisioner import GPUBurstProvisioner

    def text(name: str) -> str:
        return " ".join((REPO / "docs" / name).read_text().split())

    hub_wait = f"{GPUKernelSettings.start_timeout.default_value:g} s"
    server_wait = f"{GPUBurstProvisioner.start_timeout.default_value:g} s"
    assert f"`c.GPUKernelSettings.start_timeout` ({hub_wait}:" in text("kernels.md")
    assert f"(`c.GPUBurstProvisioner.start_timeout`, {server_wait})" in text("kernels.md")
    assert f"`GPUKernelSettings.start_timeout` ({hub_wait.replace(' s', ' s)')}" in text("troubleshooting.md")
    assert f"else {DEFAULT_REQUESTS['cpu']} CPU and {DEFAULT_REQUESTS['memory']})" in text("security.md")
    c = Config()
    c.KubeSpawner.profile_list = lambda spawner: []
    [note] = profile_notes(c)
    quoted = "No GPU kernels are offered: ..."
    assert note.startswith(quoted.removesuffix(" ...")) and quoted in text("kernels.md") and quoted in text("troubleshooting.md")


def test_make_demo_installs_only_what_the_demo_needs():
    """The README says the demo needs no browser: its target does not install chromium."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("no make")
    dry = subprocess.run(["make", "-n", "-B", "demo"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "gpuburst demo" in dry and "chromium" not in dry
    assert "chromium" in subprocess.run(["make", "-n", "-B", "test"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    readme = " ".join((REPO / "README.md").read_text().split())
    import tomllib

    python = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"].removeprefix(">=")
    assert f"Python {python} or later and Node.js" in readme and "`make demo` needs no browser" in readme


def test_the_server_api_doc_has_every_endpoint_of_the_server_extension_and_counts_them():
    import re

    from tornado.web import RequestHandler

    from jupyter_gpuburst.server.app import GPUBurstServerExtension

    app = GPUBurstServerExtension()
    app.initialize_handlers()
    methods = ("get", "post", "put", "patch", "delete")
    routes = [
        (method.upper(), path)
        for path, handler, *_ in app.handlers
        for method in methods
        if getattr(handler, method) is not getattr(RequestHandler, method)
    ]
    text = (REPO / "docs" / "api.md").read_text()
    documented = re.findall(r"^## `(GET|POST|PUT|PATCH|DELETE) (/api/gpuburst/\S+)`$", text, re.M)
    assert sorted(documented) == sorted(routes)
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
    gets = sum(method == "GET" for method, _ in routes)
    intro = " ".join(text[: text.index("## ")].split())
    assert f"It has {words[len(routes)]} endpoints" in intro
    assert f"{words[gets]} read-only `GET`s and {words[len(routes) - gets]} `POST`" in intro


def test_citations_of_the_install_guide_name_its_steps_not_the_readme():
    import re

    guide = (REPO / "docs" / "install.md").read_text()
    steps = set(re.findall(r"^(\d+)\. \*\*", guide, re.M))
    files = [*(REPO / "hub_config").rglob("*.*"), *(REPO / "jupyter_gpuburst").rglob("*.py"), *(REPO / "docs").glob("*.md")]
    for path in [REPO / "README.md", *files]:
        if path.suffix not in (".py", ".md", ".yaml", ".Dockerfile"):
            continue
        text = " ".join(path.read_text().split())
        # the guide left the README: its steps are docs/install.md's
        assert not re.search(r"README[,:]? step", text), path
        for step in re.findall(r"docs/install\.md,? \(?step (\d+)", text):
            assert step in steps, f"{path} cites step {step} of docs/install.md, which has steps {sorted(steps)}"


def test_the_example_values_quote_z2jh_s_own_start_timeout():
    import re

    import yaml

    default = yaml.safe_load((REPO / "tests" / "reference" / "z2jh" / "values.yaml").read_text())["singleuser"]["startTimeout"]
    text = " ".join((REPO / "hub_config" / "values.yaml").read_text().split())
    quoted = re.findall(r"z2jh's default is (\d+) s", text)
    assert quoted and {int(q) for q in quoted} == {default}
    assert not re.search(r"\d+ s in z2jh", text)  # a value of ours, said to be z2jh's


def test_uninstalling_runs_gpuburst_uninstall_after_the_hub_and_before_the_namespaces():
    # `gpuburst uninstall` deletes the pods before the offloadings (tests/test_uninstall.py): the
    # guide runs it once the hub is gone (it makes nothing more) and before the user namespace goes
    import re
    import shlex

    text = (REPO / "docs" / "install.md").read_text()
    section = text[text.index("## Uninstalling completely") :]
    [block] = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
    steps = [" ".join(words[:2]) for words in commands]
    real = [i for i, words in enumerate(commands) if words[:2] == ["gpuburst", "uninstall"] and "--dry-run" not in words]
    [uninstall] = real
    assert steps.index("helm uninstall") < uninstall
    assert commands[uninstall][2:4] == ["-n", "jhub-users"]
    namespaces = [i for i, words in enumerate(commands) if words[:3] == ["kubectl", "delete", "namespace"]]
    assert namespaces and min(namespaces) > uninstall
    # nothing of ours is deleted by hand, out of the command's order
    assert not [words for words in commands if words[:2] == ["kubectl", "delete"] and {"pods", "namespaceoffloading"} & set(words)]


def test_the_readme_lists_every_demo_flag():
    import re

    from jupyter_gpuburst.demo_cli import build_parser

    flags = {o for action in build_parser()._actions for o in action.option_strings if o not in ("-h", "--help")}
    text = " ".join((REPO / "README.md").read_text().split())
    knobs = text[text.index("Knobs: `gpuburst demo --help`") :].split(";", 1)[0]
    assert set(re.findall(r"`(--[\w-]+)`", knobs)) == flags


def test_what_the_docs_quote_of_doctor_is_what_doctor_prints():
    import re

    source = "".join(path.read_text() for path in sorted((REPO / "jupyter_gpuburst" / "doctor").glob("*.py")))
    quoted = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for line in page.read_text().splitlines():
            if "`gpuburst doctor`" in line:
                # a quote of its output: "..." stands for what differs per cluster
                quoted += [(page.name, q) for q in re.findall(r"warns \"([^\"]+)\"", line)]
    assert quoted, "the troubleshooting table quotes doctor's release warning"
    for page, quote in quoted:
        for fragment in filter(None, (f.strip(" ,") for f in quote.split("..."))):
            assert fragment in source, f"{page} quotes doctor saying {quote!r}: {fragment!r} is not in doctor"


def test_the_kernel_start_timeout_help_names_the_real_defaults():
    import re

    import yaml
    from kubespawner import KubeSpawner

    from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings
    from jupyter_gpuburst.server.kernels.provisioner import GPUBurstProvisioner

    trait = GPUKernelSettings.start_timeout
    text = " ".join(trait.help.split())
    z2jh = yaml.safe_load((REPO / "tests" / "reference" / "z2jh" / "values.yaml").read_text())["singleuser"]["startTimeout"]
    assert re.search(rf"Default {trait.default_value:g}\b", text)
    assert f"{KubeSpawner.start_timeout.default_value:g} s from KubeSpawner" in text and f"{z2jh:g} s from z2jh" in text
    assert f"default {GPUBurstProvisioner.start_timeout.default_value:g}" in text


def docs_pages() -> list[Path]:
    """The README and every page under docs/, how-to guides included."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_the_reference_says_where_each_option_goes_in_z2jh_values():
    from traitlets import Any as AnyTrait

    text = docs_traits.render()
    assert "| `c.GPUCullingSettings.timeout_seconds` | Float | `3600.0` | `hub.config.GPUCullingSettings.timeout_seconds` |" in text
    # a callable is Python, which z2jh's hub.config (YAML) cannot carry
    assert "| `c.GPUKernelSettings.files_policy` | Any or None | `None` | `hub.extraConfig` |" in text
    assert "| `c.GPUBurstProvisioner.start_timeout` | Float | `630.0` | `singleuser.extraFiles` |" in text

    class Thing(HasTraits):
        hook = AnyTrait(None, allow_none=True, config=True, help="A callable.")
        count = Int(1, config=True, help="Counted things.")

    Thing.__module__ = "jupyter_gpuburst.example"
    thing = docs_traits.render([("Thing", "an example", Thing)])
    assert "| `c.Thing.hook` | Any or None | `None` | `hub.extraConfig` | no |" in thing
    assert "| `c.Thing.count` | Int | `1` | `hub.config.Thing.count` | no |" in thing


def test_what_the_reference_says_a_profile_may_override_is_what_the_hub_accepts():
    import re

    from jupyter_gpuburst.hub.profiles.policy import ProfilePolicyError, check_profiles
    from jupyter_gpuburst.hub.spawner import GPUBurstSpawner

    rows = re.findall(r"^\| `c\.GPUBurstSpawner\.(\w+)` \|(?:[^|]*\|){3} ([^|]+) \|", docs_traits.render(), re.M)
    assert len(rows) == len(docs_traits.own_traits(GPUBurstSpawner))
    for name, cell in rows:
        profile = {"slug": "p", "kubespawner_override": {name: getattr(GPUBurstSpawner, name).default_value}}
        if cell == "`kubespawner_override`":
            check_profiles([profile])
        else:
            assert cell.startswith("no: ")
            with pytest.raises(ProfilePolicyError, match=name):
                check_profiles([profile])
    from jupyter_gpuburst.hub.culling.settings import OVERRIDES

    culling = dict(re.findall(r"^\| `c\.GPUCullingSettings\.(\w+)` \|(?:[^|]*\|){3} ([^|]+) \|", docs_traits.render(), re.M))
    assert {name for name, cell in culling.items() if cell != "no"} == set(OVERRIDES)


def _trait_owners() -> dict[str, type]:
    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager
    from jupyterhub.app import JupyterHub
    from kubespawner import KubeSpawner

    from jupyter_gpuburst.hub.spawner import GPUBurstSpawner

    owners = {section: cls for section, _what, cls in docs_traits._sections()}
    owners.update(JupyterHub=JupyterHub, KubeSpawner=KubeSpawner, Spawner=GPUBurstSpawner, MappingKernelManager=MappingKernelManager)
    return owners


def _same_default(stated: str, default: object) -> bool:
    import re

    words = {"true": True, "on": True, "false": False, "off": False}
    if stated.lower() in words:
        return default is words[stated.lower()]
    number = re.fullmatch(r"([\d.]+)(?: \* ([\d.]+))? ?(s|min|%)?", stated)
    assert number, f"a stated default this test cannot read: {stated!r}"
    value = float(number.group(1)) * float(number.group(2) or 1) * {"min": 60}.get(number.group(3) or "", 1)
    if number.group(3) == "%":
        value /= 100
    return isinstance(default, int | float) and not isinstance(default, bool) and abs(value - default) < 1e-9


def test_every_option_the_docs_name_exists_with_the_default_they_state():
    import re

    owners = _trait_owners()
    name = r"(?:c\.|hub\.config\.)?(GPU\w+|WarmPools|JupyterHub|KubeSpawner|MappingKernelManager)\.([a-z_]+)"
    checked = 0
    for page in docs_pages():
        text = page.read_text()
        for section, trait in re.findall(r"\b(?:c|hub\.config)\.([A-Z]\w+)\.([a-z_]+)", text):
            assert section in owners, f"{page.name} names c.{section}.{trait}: no such configurable class"
            assert trait in owners[section].class_trait_names(), f"{page.name} names {section}.{trait}, which {section} does not have"
        flat = " ".join(text.split())
        stated = re.findall(rf"`{name}`,? \(?(?:default:? )?([\w.%* ]+?) by default\b", flat)
        stated += re.findall(rf"`{name}`,? \(?default:? `?([\w.%* ]+?)`?[),;:]", flat)
        stated += re.findall(rf"^c\.{name} = ([\w.* ]+?)  # the default\b", text, re.M)
        for section, trait, value in stated:
            default = owners[section].class_traits()[trait].default_value
            assert _same_default(value.strip(), default), f"{page.name}: {section}.{trait} defaults to {default!r}, not {value!r}"
            checked += 1
    assert checked >= 5  # the patterns above still read what the pages say


def _help_of(argv: list[str]) -> str:
    import contextlib
    import importlib
    import io

    from jupyter_gpuburst.cli import SUBCOMMANDS

    module, function, _help = SUBCOMMANDS[argv[0]]
    out = io.StringIO()
    # argparse's --help exits; `gpuburst bench --help` lists the benchmarks and returns
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), contextlib.suppress(SystemExit):
        getattr(importlib.import_module(module), function)([*argv[1:], "--help"])
    return out.getvalue()


def test_every_gpuburst_command_and_flag_the_docs_give_exists():
    import re

    from jupyter_gpuburst.cli import SUBCOMMANDS

    helps: dict[tuple[str, ...], set[str]] = {}
    used = 0
    for page in [*docs_pages(), REPO / "benchmarks" / "README.md"]:
        for command in re.findall(
            r"(?:^|[`\s])gpuburst ((?:demo|sim|doctor|capacity|bench|uninstall)(?![\w:-])[^`\n#|]*)", page.read_text(), re.M
        ):
            words = command.split()
            key = tuple(words[:2]) if words[0] == "bench" and len(words) > 1 and not words[1].startswith("-") else (words[0],)
            if key[-1] == "NAME":
                continue
            if key not in helps:
                helps[key] = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", _help_of(list(key))))
            for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", command):
                assert flag in helps[key], f"{page.name}: `gpuburst {' '.join(key)}` has no {flag} ({command.strip()!r})"
                used += 1
    assert used > 20 and {key[0] for key in helps} == set(SUBCOMMANDS)


def _service_app(monkeypatch):
    """The hub service's tornado application as the hub starts it, without listening."""
    from traitlets.config import Config

    from jupyter_gpuburst.hub import service

    built = {}

    class Server:
        def __init__(self, app, **_kwargs):
            built["app"] = app

        def listen(self, *_args):
            pass

    monkeypatch.setattr(service, "HTTPServer", Server)
    capacity = service.CapacityService(None, "127.0.0.1", 0, "hub")
    capacity.config = Config()
    capacity.start()
    return built["app"]


def test_every_service_path_the_docs_give_is_served(monkeypatch):
    import re

    patterns = [rule.matcher.regex for rule in _service_app(monkeypatch).wildcard_router.rules]
    paths = set()
    for page in [*docs_pages(), *sorted((REPO / "hub_config").glob("*.*"))]:
        paths |= set(re.findall(r"/services/gpuburst/[\w./<>-]*", page.read_text()))
    assert len(paths) > 8
    for path in sorted(paths):
        concrete = path.rstrip(".").replace("<id>", "0a1b")
        assert any(p.fullmatch(concrete) for p in patterns), f"the docs give {path}, which the gpuburst service does not serve"


def test_every_metric_the_docs_name_is_exported():
    import re

    source = "".join(path.read_text() for path in (REPO / "jupyter_gpuburst" / "hub").rglob("*.py"))
    suffixes = set(re.findall(r"(?:metric_name|Counter|Gauge|Histogram)\(\s*\"(\w+)\"", source))
    named = {name for page in docs_pages() for name in re.findall(r"jupyterhub_gpuburst_(\w+)", page.read_text())}
    assert len(named) >= 8
    for name in sorted(named):
        assert name.removesuffix("_total") in suffixes, f"the docs name jupyterhub_gpuburst_{name}, which nothing exports"


def test_the_docs_index_has_z2js_sections_and_reaches_every_page():
    import re

    text = (REPO / "docs" / "README.md").read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections == ["Install", "How-to guides", "Reference", "Concepts", "For developers", "Students and teachers"]
    linked = {(REPO / "docs" / target).resolve() for target in re.findall(r"\]\(([^)#:]+)", text)}
    for page in sorted((REPO / "docs").rglob("*.md")):
        assert page == REPO / "docs" / "README.md" or page.resolve() in linked, f"docs/README.md does not link {page.relative_to(REPO)}"


def _blocks(text: str, language: str) -> list[str]:
    import re

    return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


def _config_of_python(source: str, monkeypatch) -> dict:
    """What a jupyterhub_config.py block sets, with install(c) and sqlite_wal() left uncalled."""
    from traitlets.config import Config

    import jupyter_gpuburst.hub
    import jupyter_gpuburst.hub.database

    monkeypatch.setattr(jupyter_gpuburst.hub, "install", lambda c: None)
    monkeypatch.setattr(jupyter_gpuburst.hub.database, "sqlite_wal", lambda: None)
    c = Config()
    c.JupyterHub.load_roles = []
    exec(compile(source, "jupyterhub_config.py", "exec"), {"c": c})
    return {section: dict(values) for section, values in c.items() if values and values != {"load_roles": []}}


def _config_of_values(values: dict, monkeypatch) -> dict:
    """What z2jh makes of the same values: hub.config as it is, hub.loadRoles as load_roles,
    then each hub.extraConfig snippet in order of its key."""
    hub = values.get("hub") or {}
    config = {section: dict(traits) for section, traits in (hub.get("config") or {}).items()}
    if hub.get("loadRoles"):
        roles = [{"name": name, **role} for name, role in hub["loadRoles"].items()]
        config.setdefault("JupyterHub", {})["load_roles"] = roles
    snippets = "\n".join(code for _name, code in sorted((hub.get("extraConfig") or {}).items()))
    for section, traits in _config_of_python(snippets, monkeypatch).items():
        config.setdefault(section, {}).update(traits)
    return config


def test_every_how_to_gives_the_same_settings_for_helm_and_for_jupyterhub_config_py(monkeypatch):
    import copy

    import yaml

    pages = sorted((REPO / "docs" / "how-to").glob("*.md"))
    assert {page.stem for page in pages} >= {"prepare-a-lab", "culling-and-budgets", "kernel-mode", "upgrade", "uninstall"}
    owners = _trait_owners()
    for page in pages:
        text = page.read_text()
        [helm] = _blocks(text, "yaml")
        [python] = _blocks(text, "python")
        values = yaml.safe_load(helm)
        assert set(values) <= {"hub", "singleuser"}, page.name
        from_python = _config_of_python(python, monkeypatch)
        if page.stem == "upgrade":  # images, not settings: the tag is the same
            assert values["singleuser"]["image"]["tag"] in from_python["KubeSpawner"]["image"]
            continue
        from_values = _config_of_values(values, monkeypatch)
        assert from_values == from_python, f"{page.name}: its helm and jupyterhub_config.py blocks differ"
        for section, traits in from_python.items():
            for name, value in traits.items():
                # each value is one the option takes (a wrong name or type fails here)
                holder = HasTraits()
                holder.add_traits(value=copy.deepcopy(owners[section].class_traits()[name]))
                holder.value = value


def test_the_service_api_page_lists_every_endpoint_and_the_capacity_json(monkeypatch):
    import re

    from jupyter_gpuburst.hub.capacity.report import capacity_report

    app = _service_app(monkeypatch)
    text = (REPO / "docs" / "service-api.md").read_text()
    table = text[: text.index("## The capacity JSON")]
    documented = [p.replace("<id>", "0a1b") for p in re.findall(r"(/services/gpuburst/[\w./<>-]*)`", table)]
    for rule in app.wildcard_router.rules:
        assert any(rule.matcher.regex.fullmatch(p) for p in documented), f"docs/service-api.md does not list {rule.matcher.regex.pattern}"

    class Tracker:
        ready, queue_length = True, 0

        def snapshot(self):
            return None

        def placements(self):
            return {}

    keys = re.findall(r"^\| `(\w+)` \|", text[text.index("## The capacity JSON") :], re.M)
    assert keys == list(capacity_report(Tracker()))


def test_the_metrics_page_lists_every_series_we_export():
    import re

    source = "".join(path.read_text() for path in (REPO / "jupyter_gpuburst" / "hub").rglob("*.py"))
    counters = set(re.findall(r"(?:Counter|CounterMetricFamily)\(\s*(?:metric_name\()?\"(\w+)\"", source))
    others = set(re.findall(r"(?:Gauge|Histogram|GaugeMetricFamily)\(\s*(?:metric_name\()?\"(\w+)\"", source))
    exported = {f"jupyterhub_gpuburst_{name}_total" for name in counters} | {f"jupyterhub_gpuburst_{name}" for name in others}
    listed = set(re.findall(r"^\| `(jupyterhub_gpuburst_\w+)` \|", (REPO / "docs" / "metrics.md").read_text(), re.M))
    assert len(exported) >= 12 and listed == exported


def test_the_facts_stated_twice_agree():
    import re

    import yaml

    from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings
    from jupyter_gpuburst.hub.pools.settings import WarmPools

    def flat(name: str) -> str:
        return " ".join((REPO / name).read_text().split())

    # the kernel ports: ten from base_port, in the docs as in the values' egress rule
    first = GPUKernelSettings.base_port.default_value
    assert f"({first}–{first + 9}:" in flat("docs/kernels.md")
    # the placeholders' PriorityClass: the docs, the manifest and the defaults
    manifest = yaml.safe_load((REPO / "hub_config" / "warm-pools.yaml").read_text())
    assert (manifest["metadata"]["name"], manifest["value"]) == (WarmPools.priority_class.default_value, WarmPools.priority.default_value)
    assert f"PriorityClass `{manifest['metadata']['name']}` (value {manifest['value']}," in flat("docs/warm-pools.md")
    # the pools' cost example: the same numbers, and the sum right, wherever it is given
    examples = [
        *re.findall(r"(\d+) GPUs from (\d+):(\d+) to (\d+):(\d+) are (\d+) GPU-hours", flat("README.md")),
        *re.findall(r"a pool of (\d+) GPUs kept from (\d+):(\d+) to (\d+):(\d+) costs (\d+) GPU-hours", flat("docs/warm-pools.md")),
    ]
    assert len(examples) == 2 and len(set(examples)) == 1
    gpus, h0, m0, h1, m1, hours = map(int, examples[0])
    assert gpus * ((h1 * 60 + m1) - (h0 * 60 + m0)) / 60 == hours
