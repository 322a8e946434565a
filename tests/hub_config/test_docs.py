"""The README and docs/: the two commands first, a short README that links every page, and a
configuration reference that matches the traits."""

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

    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
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


def test_uninstalling_deletes_every_pod_of_ours_before_the_offloading_that_reaches_donors():
    import re
    import shlex

    from jupyter_gpuburst.core import keys
    from jupyter_gpuburst.doctor.checks import SERVER_COMPONENT

    text = (REPO / "docs" / "install.md").read_text()
    section = text[text.index("## Uninstalling completely") :]
    [block] = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [shlex.split(line) for line in block.splitlines() if line.strip()]
    deleted: dict[str, set[str]] = {}  # namespace -> components whose pods are gone
    offloaded = 0
    for words in commands:
        if words[:2] != ["kubectl", "delete"] or "-n" not in words:
            continue
        namespace = words[words.index("-n") + 1]
        if "pods" in words:
            [selector] = [words[i + 1] for i, w in enumerate(words) if w == "-l"]
            deleted.setdefault(namespace, set()).update(re.findall(r"[\w-]+", selector.split(" in ", 1)[-1]))
        elif "namespaceoffloading" in words:
            offloaded += 1
            ours = {keys.KERNEL_COMPONENT, keys.POOL_COMPONENT}
            if "-kernels-" not in namespace:
                ours.add(SERVER_COMPONENT)
            assert ours <= deleted.get(namespace, set()), f"{namespace}: {ours - deleted.get(namespace, set())} left on the donors"
    assert offloaded == 2  # the user namespace and the example donor's kernel namespace


def test_the_readme_lists_every_demo_flag():
    import re

    from jupyter_gpuburst.demo import build_parser

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
